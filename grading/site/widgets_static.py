"""Widgets on a static page: the picture and the numbers the executed notebook drew, no JavaScript.

    replace_widget_views(notebook)     # in place; returns how many widget outputs were replaced

A page has no kernel, so an ipywidgets dashboard cannot move. The executed notebook keeps
every widget's last state (nbclient stores it in ``metadata.widgets``): boxes list their
children, an ``Image`` holds its PNG as a base64 buffer, an ``HTML`` its markup, a control
its description and value. Each widget-view output becomes an HTML output that draws this
state statically, with a note that the notebook has to run for the controls to move. The
state itself is then dropped from the notebook (the page does not load a widget manager).
"""
from __future__ import annotations

import html

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
MODEL_PREFIX = "IPY_MODEL_"
#: Output mime types an Output widget's stored outputs may show, best first.
OUTPUT_IMAGES = ("image/png", "image/jpeg")
NOTE = ("Interactive in the notebook: this is a static copy of what the executed notebook drew. "
        "Run the notebook (links at the top of the page) to move the controls.")
#: How deep boxes may nest before the walk stops (a cycle in a broken state must not hang).
MAX_DEPTH = 20


def replace_widget_views(notebook) -> int:
    """Replace each widget-view output of ``notebook`` (an nbformat node) by its static draw; the count."""
    states = (notebook.metadata.get("widgets") or {}).get(WIDGET_STATE, {}).get("state", {})
    replaced = 0
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            view = (output.get("data") or {}).get(WIDGET_VIEW)
            if view is None:
                continue
            drawn = draw_model(states, view.get("model_id", ""), 0)
            if not drawn:  # no stored state: the image a front end saved next to the view, if any
                drawn = _fallback_image(output["data"])
            output["data"] = {"text/html": f'<div class="static-widget">{drawn}'
                                           f'<p class="widget-note">{html.escape(NOTE)}</p></div>'}
            replaced += 1
    notebook.metadata.pop("widgets", None)
    return replaced


def _fallback_image(data: dict) -> str:
    for mime in OUTPUT_IMAGES:
        if mime in data:
            return f'<img alt="widget" src="data:{mime};base64,{_one_line(data[mime])}">'
    return ""


def _one_line(base64_text) -> str:
    text = "".join(base64_text) if isinstance(base64_text, list) else str(base64_text)
    return text.replace("\n", "")


def draw_model(states: dict, model_id: str, depth: int) -> str:
    """HTML for the widget ``model_id`` and its children, from the stored ``states``; '' when unknown."""
    entry = states.get(model_id)
    if entry is None or depth > MAX_DEPTH:
        return ""
    name, state = entry.get("model_name", ""), entry.get("state", {})
    if name.endswith("BoxModel"):
        children = [draw_model(states, _model_id(child), depth + 1) for child in state.get("children", [])]
        kind = "row" if name in ("HBoxModel", "GridBoxModel") else "column"
        return f'<div class="widget-{kind}">' + "".join(children) + "</div>"
    if name == "ImageModel":
        return _image(entry, state)
    if name in ("HTMLModel", "HTMLMathModel"):
        return f'<div class="widget-html">{state.get("value", "")}</div>'
    if name == "LabelModel":
        return f'<span class="widget-label">{html.escape(str(state.get("value", "")))}</span>'
    if name == "OutputModel":
        return "".join(_stored_output(output) for output in state.get("outputs", []))
    if "value" in state or "index" in state:
        return _control(state)
    return ""


def _model_id(reference) -> str:
    return str(reference).removeprefix(MODEL_PREFIX)


def _image(entry: dict, state: dict) -> str:
    """The Image widget's PNG, from the buffer stored for its ``value``."""
    for buffer in entry.get("buffers", []):
        if buffer.get("path") == ["value"] and buffer.get("encoding", "base64") == "base64" and buffer.get("data"):
            image_format = html.escape(str(state.get("format", "png")))
            return f'<img class="widget-image" alt="figure" src="data:image/{image_format};base64,{buffer["data"]}">'
    return ""


def _control(state: dict) -> str:
    """'description: value' for a slider, a dropdown, a checkbox (a dropdown shows its chosen label)."""
    value = _formatted(state.get("value"), state.get("readout_format"))
    labels = state.get("_options_labels")
    if labels and isinstance(state.get("index"), int) and 0 <= state["index"] < len(labels):
        value = labels[state["index"]]
    description = state.get("description") or ""
    text = f"{description} {value}" if description else str(value)
    return f'<span class="widget-control">{html.escape(text.strip())}</span>'


def _formatted(value, readout_format):
    """A slider's value as its readout shows it ('.3g' -> 7e+10); the value itself without a usable format."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(readout_format, str):
        try:
            return format(value, readout_format)
        except ValueError:  # a d3 format Python does not know
            return value
    return value


def _stored_output(output: dict) -> str:
    data = output.get("data") or {}
    image = _fallback_image(data)
    if image:
        return image
    text = output.get("text") or data.get("text/plain") or ""
    text = "".join(text) if isinstance(text, list) else str(text)
    return f"<pre>{html.escape(text)}</pre>" if text else ""
