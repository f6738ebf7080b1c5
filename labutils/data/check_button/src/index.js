/*
 * "Check my lab": a button in the notebook toolbar, an entry at the end of the Run menu and
 * in the command palette. It saves the notebook, asks the server to run `labutils check` on
 * it (POST /labutils/check, labutils/jupyter_check.py) and shows what the check printed, one
 * line per graded part (passed / failed with the check's message / not attempted), under a
 * verdict, in a dialog. Closing the dialog while the check runs stops it.
 *
 * Rebuild after editing: `make labextension` (writes labutils/data/jupyter/labextensions).
 */
import { Dialog, ICommandPalette } from '@jupyterlab/apputils';
import { PathExt, URLExt } from '@jupyterlab/coreutils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

const COMMAND = 'labutils:check-lab';
/** The words labutils check starts a part's line with, and the CSS class of each. */
const PART_STATUSES = [
  ['not attempted', 'labutils-check-not-attempted'],
  ['passed', 'labutils-check-passed'],
  ['failed', 'labutils-check-failed']
];
/** Lines of the check's error output shown when it could not check the notebook. */
const MAX_ERROR_LINES = 40;

/** Replace what the dialog's body shows with `children` (DOM nodes). */
function show(body, ...children) {
  body.node.replaceChildren(...children);
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** Ask the server to check the notebook at `path` (relative to its root); its JSON reply. */
async function requestCheck(path, signal) {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'labutils', 'check');
  const init = { method: 'POST', body: JSON.stringify({ path }), signal };
  const response = await ServerConnection.makeRequest(url, init, settings);
  const reply = await response.json().catch(() => ({}));
  if (response.status === 404) {
    throw new Error(
      'This Jupyter server cannot run labutils check: start JupyterLab with `make lab` ' +
        '(it loads the course configuration in labutils/data/jupyter).'
    );
  }
  if (!response.ok) {
    throw new Error(reply.message || `the server answered ${response.status}`);
  }
  return reply;
}

/** [CSS class, headline] summing up a reply of the server. */
function verdict(reply) {
  if (reply.timed_out) {
    return ['labutils-check-failed', `The check was stopped after ${reply.seconds} s, the most one check may take.`];
  }
  if (reply.exit_code === 0) {
    return ['labutils-check-passed', 'Every part passes its visible checks.'];
  }
  if (reply.exit_code === 1 && reply.stdout.trim()) {
    return ['labutils-check-failed', 'Not every part passes yet: see each part below.'];
  }
  if (reply.exit_code === 2) {
    return ['labutils-check-error', 'This notebook cannot be checked.'];
  }
  return ['labutils-check-error', `labutils check stopped with exit status ${reply.exit_code}.`];
}

/** What the check printed, each part's line coloured by its status. */
function outputLines(text) {
  const output = element('div', 'labutils-check-output');
  for (const line of text.replace(/\s+$/, '').split('\n')) {
    const status = PART_STATUSES.find(([word]) => line.trim().startsWith(word));
    output.appendChild(element('div', status ? `labutils-check-part ${status[1]}` : '', line));
  }
  return output;
}

function showResult(body, reply) {
  const [kind, headline] = verdict(reply);
  const nodes = [element('p', `labutils-check-verdict ${kind}`, headline)];
  if (reply.stdout.trim()) {
    nodes.push(outputLines(reply.stdout));
  }
  const checked = reply.exit_code === 0 || (reply.exit_code === 1 && reply.stdout.trim());
  if (!checked && reply.stderr.trim()) {
    const errors = reply.stderr.replace(/\s+$/, '').split('\n').slice(-MAX_ERROR_LINES);
    nodes.push(element('div', 'labutils-check-output labutils-check-stderr', errors.join('\n')));
  }
  nodes.push(element('p', 'labutils-check-note', `Ran \`${reply.command}\` in ${reply.seconds} s.`));
  show(body, ...nodes);
}

function showProgress(body, started) {
  const seconds = Math.round((Date.now() - started) / 1000);
  show(
    body,
    element('p', 'labutils-check-verdict', `Checking… ${seconds} s`),
    element(
      'p',
      'labutils-check-note',
      'Saved. Every cell but the hidden-test ones runs in a fresh kernel, as the grader runs ' +
        'them; this takes a minute. Close stops the check.'
    )
  );
}

/** Save the notebook of `panel`, check it, show the result in a dialog. */
async function checkNotebook(panel) {
  const path = panel.context.localPath;
  const body = new Widget();
  body.addClass('labutils-check');
  show(body, element('p', 'labutils-check-verdict', 'Saving the notebook…'));
  const dialog = new Dialog({
    title: `Check my lab: ${PathExt.basename(path)}`,
    body,
    buttons: [Dialog.okButton({ label: 'Close' })]
  });
  dialog.addClass('labutils-check-dialog');
  const stopper = new AbortController();
  void dialog.launch().then(() => stopper.abort());
  let timer = undefined;
  try {
    await panel.context.save();
    const started = Date.now();
    showProgress(body, started);
    timer = setInterval(() => showProgress(body, started), 1000);
    const reply = await requestCheck(path, stopper.signal);
    clearInterval(timer);
    showResult(body, reply);
  } catch (error) {
    clearInterval(timer);
    if (!stopper.signal.aborted) {
      show(
        body,
        element('p', 'labutils-check-verdict labutils-check-error', 'The check could not run.'),
        element('div', 'labutils-check-output labutils-check-stderr', String(error.message || error))
      );
    }
  }
}

/** Whether the notebook is one of the course's labs (`labNN_*.ipynb`, in labs/ or fetched from the
 * hub's exchange): only a lab has parts to check, so a chapter shows no button. */
function isLab(panel) {
  return Boolean(panel) && /(^|\/)lab\d\d_[^/]*\.ipynb$/.test(panel.context.path);
}

const plugin = {
  id: 'labutils-check:plugin',
  description: 'Check my lab: run labutils check on the open notebook and show each part.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette],
  activate: (app, tracker, palette) => {
    let running = false;
    app.commands.addCommand(COMMAND, {
      label: 'Check my lab',
      caption:
        'Save this notebook and run its visible checks as the grader does (labutils check): ' +
        'one line per part',
      isVisible: () => isLab(tracker.currentWidget),
      isEnabled: () => !running && isLab(tracker.currentWidget),
      execute: async () => {
        const panel = tracker.currentWidget;
        if (!panel) {
          return;
        }
        running = true;
        app.commands.notifyCommandChanged(COMMAND);
        try {
          await checkNotebook(panel);
        } finally {
          running = false;
          app.commands.notifyCommandChanged(COMMAND);
        }
      }
    });
    tracker.currentChanged.connect(() => app.commands.notifyCommandChanged(COMMAND));
    if (palette) {
      palette.addItem({ command: COMMAND, category: 'Notebook Operations' });
    }
  }
};

export default plugin;
