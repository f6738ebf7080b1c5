"""Every formula in the course's markdown is LaTeX, in the course's notation.

The notation table is in ``notebooks/00_start_here.ipynb`` ("Notation and units"). This test
reads the markdown of every chapter, every lab's nbgrader source (``solutions/``) and every
released lab (``labs/``), removes what is allowed to look like code or maths (fenced code
blocks, code spans, ``$...$`` and ``$$...$$``, link targets, HTML tags) and looks in what is
left, the prose, for

- a plain-text formula (:data:`PLAIN_FORMULA`): ``2(n-1)/n``, ``x*y``, ``x^2``, ``sqrt(``,
  ``Psi`` or ``alpha`` spelled out, ``a <= b``, ``N = 64``, ``W_r``, ``2N`` ...;
- a symbol of the table used for another quantity (:data:`SYMBOL_CLASH`): ``p ranks`` (the
  course writes $n$ ranks in a collective, $d,t,p,e$ for the degrees), ``N GPUs`` ($N$ is the
  parameter count), ``t seconds`` ($T$), ``n bytes`` ($S$), a bias $b$ ($b$ is the microbatch
  size; a bias is $\\mathbf{b}$) ...

A lab's students read its diagrams as closely as its prose: in the labs (``solutions/`` and
``labs/``) a fenced block without a language, a diagram, may name things (``W_0``, ``c2``) but
hold no formula (:func:`diagram_formulas`): the formula goes in LaTeX beside it.

The detectors are tested on positive and negative examples first, so the notebook tests
cannot pass because the detector finds nothing at all.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted([*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "solutions").glob("*/*.ipynb"),
                    *(ROOT / "labs").glob("*/*.ipynb")])

_FENCED = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", re.MULTILINE | re.DOTALL)
_DISPLAY_MATH = re.compile(r"(?<!\\)\$\$.+?(?<!\\)\$\$", re.DOTALL)
_INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\s)[^$\n]+?(?<![\s\\])\$(?!\d)")
_CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
_LINK_TARGET = re.compile(r"\]\([^)\s]*\)|<https?://[^>]*>|https?://\S+")
_HTML = re.compile(r"<!--.*?-->|</?[A-Za-z][^<>]*>", re.DOTALL)
_BLANK = " "

_GREEK = ("alpha|beta|gamma|delta|epsilon|theta|lambda|mu|sigma|tau|psi|Psi|Sigma|Delta|Lambda|Theta"
          "|Omega|omega|phi|pi")
_UNIT_BEFORE_SLASH = r"(?:[KMGTP]i?B|[KMGTP]b|FLOPs?|[kMGTP]?FLOP|bits?|tokens|B|b|[kM]?W|I)"
_SINGLE = r"(?<![\w.'’$\\])[A-Za-z](?![\w'’])"  # a one-letter symbol, not part of a word
_TABLE = r"(?<![\w.'’$\\])[NDndtpemvSTLhsbVEkcBPIxyr](?![\w'’])"  # one of the table's symbols (and x, y, r)
_SHORT = r"[A-Za-z0-9]{1,3}"


def _symbol(letter: str) -> str:
    """A pattern for ``letter`` as a symbol, bare or alone in ``$...$``, not inside a longer formula."""
    return rf"(?<![\w.$\\'’])(?:\${letter}\$|{letter})"


#: (name, pattern) of plain-text formulas in prose.
PLAIN_FORMULA = (
    ("bracketed sum or difference", re.compile(
        r"\w\(\s*(?:\d+|[A-Za-z])\s*[-+]\s*(?:\d+|[A-Za-z])\s*\)"
        rf"|\(\s*{_SHORT}\s*[-+]\s*{_SHORT}(?:\s*[-+]\s*{_SHORT})*\s*\)\s*[/*]")),
    ("sum or difference of symbols", re.compile(
        rf"{_SINGLE}\s*[-+−]\s*(?:{_SINGLE}|\d+(?![\w.,]\d))(?!\s*[-/]?\s*(?:bit|byte|way|dim))")),
    ("product with *", re.compile(r"[\w)]\*[\w(]|[\w)]\s+\*\s+[\w(]")),
    ("product with x", re.compile(rf"(?:{_SINGLE}|\d|\))\s+[x×·]\s+(?:{_SINGLE}|\d+(?:\.\d+)?\s*[/(]|\()")),
    ("power", re.compile(r"[\w)]\^|\w\*\*\d")),
    ("function call", re.compile(r"\b(?:sqrt|log2?|log10|ln|exp|ceil|floor|min|max|softmax|argmax|mod)\s*\(")),
    ("logarithm", re.compile(rf"\b(?:lg|log2?|log_2)\s+{_SINGLE}")),
    ("Greek letter spelled out", re.compile(
        rf"(?<![\w\\-])(?<!machine )(?:{_GREEK})(?!-beta\b)"  # "the alpha-beta model" is a name
        r"(?:\s*[=+*/]|\s*-\s*\d|\d|\s+(?:term|parameter|coefficient|x|times)\b|(?![\w'’-]))"
        r"(?!\s+(?:version|release|test))")),
    ("Greek or maths character outside $...$", re.compile(r"[α-ωΑ-Ω≤≥≠≈√∑∏∞∈⌈⌉⌊⌋]")),
    ("comparison", re.compile(rf"<=|>=|!=|==|(?:{_SINGLE}|\d)\s*[<>]\s*\w|\w\s*[<>]\s*(?:{_SINGLE}|\d)")),
    ("equation with a one-letter symbol", re.compile(rf"{_SINGLE}\s*=\s*[-\w(]")),
    ("subscript", re.compile(r"(?<![\w.\\])[A-Za-z]_(?:\{|[A-Za-z0-9]{1,3}\b)")),
    ("coefficient times a symbol", re.compile(r"(?<![\w.,])\d+(?:\.\d+)?(?:N|Psi|n|d|p|L|h|V)(?!\w)")),
    ("one-letter ratio", re.compile(rf"{_TABLE}\s*/\s*(?:{_TABLE}|\d+\b)|(?<![\w.])\d+\s*/\s*{_TABLE}")),
    ("modulo", re.compile(r"\w\s+%\s+\w")),
)
#: Units with a slash (GB/s, FLOP/B, I/O) are blanked before :data:`PLAIN_FORMULA` looks at a line.
_UNIT_SLASH = re.compile(rf"(?<![\w.]){_UNIT_BEFORE_SLASH}/[sB](?!\w)|\bI/O\b|\bB/(?:s|param|parameter|token)\b")

#: (symbol, what it is in the course, pattern of a use for something else) where cheap to tell.
SYMBOL_CLASH = (
    ("N", "the parameter count", re.compile(
        rf"{_symbol('N')}\s+(?:GPUs?|ranks?|devices|workers|processes|nodes|machines)\b")),
    ("p", "the pipeline degree (ranks of a collective are n)", re.compile(
        rf"{_symbol('p')}\s+(?:GPUs?|ranks?|processes|workers|devices)\b")),
    ("P", "the peak FLOP/s", re.compile(rf"{_symbol('P')}\s+(?:GPUs?|ranks?|processes|workers|devices)\b")),
    ("T", "a time in seconds", re.compile(rf"{_symbol('T')}\s+(?:tokens|ranks|GPUs)\b")),
    ("t", "the tensor-parallel degree (time is T)", re.compile(
        rf"{_symbol('t')}\s+(?:seconds|s\b|microseconds|us\b)")),
    ("n", "ranks in a collective (bytes are S)", re.compile(rf"{_symbol('n')}\s+(?:bytes|B\b|elements|values)")),
    ("S", "the bytes of a buffer", re.compile(rf"{_symbol('S')}\s+(?:ranks|GPUs|stages|seconds)\b")),
    ("k", "experts per token (top-k)", re.compile(rf"{_symbol('k')}\s+(?:steps|iterations|ranks|GPUs)\b")),
    ("s, k or t", "the sequence length, experts per token, tensor-parallel degree (not an index)",
     re.compile(r"(?<![\w.])(?:stage|step)\s+\$?[skt]\$?(?![\w'’])")),
)
_BIAS = re.compile(r"\+\s*b(?:_\{?[\w,]+\}?)?\s*(?=\$|\\[,;]|\))|\\,b\$|\bbias(?:es)?\s+(?:slice\s+)?\$b\b"
                   r"|\bslice \$b_")
SYMBOL_CLASH += (
    ("m", "microbatches per step", re.compile(rf"{_symbol('m')}\s+(?:message latenc\w*|latenc\w*)\b")),
    ("D", "a whole run's training tokens (per GPU and step is another quantity)", re.compile(
        rf"{_symbol('D')}\s+tokens\s+(?:per|on)\s+(?:one\s+|each\s+)?(?:GPU|device|rank)"
        rf"|tokens\s+(?:per|on one)\s+(?:GPU|device|rank)(?:\s+per\s+step)?,?\s+\(?{_symbol('D')}(?![\w_])")),
)
SYMBOL_CLASH += (("b", "the microbatch size in sequences (write a bias $\\mathbf{b}$)", _BIAS),)
#: Symbols that a cell may use for its own quantity when it speaks of what the word names.
CLASH_CONTEXT = {"p": re.compile(r"pipeline|stage", re.IGNORECASE)}
#: Symbols whose clash pattern counts only in a cell that speaks of what the clash would name.
CLASH_ONLY_WITH = {"b": re.compile(r"\bbias", re.IGNORECASE)}


def _blank(match: re.Match) -> str:
    """The match with every character but line ends replaced by a space."""
    return re.sub(r"[^\n]", _BLANK, match.group(0))


def without_code(markdown: str) -> str:
    """The markdown without code blocks, code spans, link targets and HTML: maths is kept."""
    text = _FENCED.sub(_blank, markdown)
    text = _CODE_SPAN.sub(_blank, text)
    return _HTML.sub(_blank, _LINK_TARGET.sub(_blank, text))


def prose(markdown: str) -> str:
    """The markdown with code, maths, link targets and HTML blanked out (line numbers kept)."""
    return _INLINE_MATH.sub(_blank, _DISPLAY_MATH.sub(_blank, without_code(markdown)))


_DIAGRAM = re.compile(r"^[ \t]*(```|~~~)[ \t]*\n(.*?)^[ \t]*\1[ \t]*$", re.MULTILINE | re.DOTALL)
#: What a diagram may not hold: every plain formula but a subscripted name (a label such as W_0).
DIAGRAM_FORMULA = tuple((name, pattern) for name, pattern in PLAIN_FORMULA if name != "subscript")


def diagram_formulas(markdown: str) -> list[tuple[str, str]]:
    """(kind, line) for each plain-text formula inside a fenced block without a language (a diagram)."""
    hits = []
    for block in _DIAGRAM.finditer(markdown):
        for line in block.group(2).splitlines():
            rest = _UNIT_SLASH.sub(_blank, line)
            hits += [(f"{name} in a diagram", line.strip()) for name, pattern in DIAGRAM_FORMULA if pattern.search(rest)]
    return hits


def plain_formulas(markdown: str) -> list[tuple[str, str]]:
    """(kind, line) for each plain-text formula in the prose of ``markdown``."""
    hits = []
    for line, rest in zip(markdown.splitlines(), prose(markdown).splitlines()):
        rest = _UNIT_SLASH.sub(_blank, rest)
        hits += [(name, line.strip()) for name, pattern in PLAIN_FORMULA if pattern.search(rest)]
        if "$" in rest.replace("\\$", ""):
            hits.append(("unmatched $", line.strip()))
    return hits


def symbol_clashes(markdown: str) -> list[tuple[str, str]]:
    """(symbol: meaning, line) for each use of a table symbol for another quantity."""
    hits = []
    lines = markdown.splitlines()
    for number, line in enumerate(without_code(markdown).splitlines()):
        for symbol, meaning, pattern in SYMBOL_CLASH:
            context, required = CLASH_CONTEXT.get(symbol), CLASH_ONLY_WITH.get(symbol)
            if required and not required.search(markdown):
                continue
            if pattern.search(line) and not (context and context.search(markdown)):
                hits.append((f"{symbol} is reserved for {meaning}", lines[number].strip()))
    return hits


@dataclass(frozen=True)
class Hit:
    """One finding in one markdown cell of one notebook."""

    notebook: str
    cell: int
    kind: str
    line: str

    def __str__(self) -> str:
        return f"{self.notebook}, markdown cell {self.cell}: {self.kind}: {self.line!r}"


def notebook_hits(path: Path) -> list[Hit]:
    """The plain formulas and symbol clashes of every markdown cell of the notebook at ``path``."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    name = str(path.relative_to(ROOT))
    lab = path.relative_to(ROOT).parts[0] in ("solutions", "labs")
    hits = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        found = plain_formulas(source) + symbol_clashes(source) + (diagram_formulas(source) if lab else [])
        hits += [Hit(name, index, kind, line) for kind, line in found]
    return hits


# --- the detector on examples ------------------------------------------------------------

FORMULAS = [
    "each rank sends 2(n-1)/n of the buffer",
    "the bubble is (p-1)/(m+p-1) of the step",
    "busbw = algbw x 2(n-1)/n",
    "each made of n - 1 steps",
    "from stage s to s + 1",
    "the product x*y of the two",
    "it costs a * b seconds",
    "intensity grows like N^2",
    "a 2**30 byte buffer",
    "the error falls as sqrt(m)",
    "2 log2(n) steps",
    "2 lg p alpha",
    "4Psi + 12Psi/N bytes per rank",
    "the paper's Psi is our N",
    "the alpha term dominates",
    "latency alpha, and beta seconds per byte",
    "dX = Σ_r dX_r",
    "GeLU(a + b) ≠ GeLU(a) + GeLU(b)",
    "when numel <= n the chunks are empty",
    "as long as m >= p",
    "if a < b the ring wins",
    "For N = 64 that is 120 GB",
    "the router's weight W_r scores them",
    "moves 2N per step",
    "each rank updates 1/d of them",
    "algbw is S/T",
    "the first numel % n chunks",
    "the loss is divided by $m$ and by m $",
    "a ratio of (p-1) / m",
    "a latency of 2(n-1) alpha",
    "(p - 1) / m of the ideal time",
]

PROSE = [
    "each rank sends $2(n-1)/n$ of the buffer",
    "$$\\frac{p-1}{m+p-1}$$ of the step",
    "call `dist.all_reduce(t, group=group)` on a copy",
    "```\nstep s (s = 0 .. n-2): rank r sends chunk (r - s - 1) mod n\n```",
    "a 400 Gb/s port moves 50 GB/s per direction, 989 TFLOP/s dense, 295 FLOP/B",
    "**Grading: 16 points.** Part 1: *f* and *g* (4), **bold** text",
    "1F1B and GPipe, the 3D strategy of 2D meshes, GPT-3 and H100 SXM, top-k routing",
    "the all-reduce of 8 x H100 GPUs and a 2 x 2 grid",
    "see [the paper](https://arxiv.org/abs/2104.04473) and https://github.com/NVIDIA/nccl-tests",
    "x-axis, y-axis, e-mail, A100-80GB, Part 2 - the ring",
    "the alpha release of a library, an I/O bound job, a beta version",
    "<img src=\"a_b.png\" width=\"600\"/> <br>",
    "Adam (Kingma and Ba, arXiv:1412.6980), steps 1, 2 and 3; at most 4 in flight; 50% of peak",
    "rows $r \\cdot \\frac{out}{t}$ to $(r+1) \\cdot \\frac{out}{t} - 1$ of $W$",
    "an all-reduce costs 2 all-gathers' worth, 1.5x stage 2's traffic, 20 iterations (-n 20)",
    "chapter 10.3, section 4.2, 1-2 days, pages 3-4, 8-bit and 16-bit, 2-way and 4-way",
    "a price of \\$5 per hour",
    "the alpha-beta model fitted to the timings, float32's machine epsilon",
    "**Run > Run All Cells**, paths NV# > PIX > PXB",
    "the f/g table's counts, N/A in the table",
    "streams (weight-stationary) through FSDP (ZeRO-3) and (read + write)",
]

CLASHES = ["on p ranks the ring", "with N GPUs the model", "N ranks in all", "took t seconds",
           "a message of n bytes", "on $N$ GPUs", "with $p$ ranks", "stage s holds", "after k steps",
           "stage $k$ runs at most $p - k$ forwards", "for step t = 1, 2",
           "pays $m$ message latencies per step", "with $D$ tokens per GPU", "the tokens per GPU per step $D$",
           "a dense layer computes $Y = XW^\\top + b$ with a bias", "and the same slice $b_r$ of the bias",
           "$\\mathrm{GeLU}(X W_1^\\top + b_1)\\, W_2^\\top + b_2$ and its biases", "the bias: off by $(t-1)\\,b$"]
NOT_CLASHES = ["on $n$ ranks the ring", "the $p$ stages, one per rank", "$N$ parameters and $d$ ranks",
               "took $T$ seconds", "a message of $S$ bytes", "the `n` ranks of `group`", "stage $r$ holds", "step $j$ of the ring",
               "moves $S \\log_2 n$ bytes", "$p$ GPUs, one pipeline stage each",
               "$Y = XW^\\top + \\mathbf{b}$ and the bias slice $\\mathbf{b}_r$",
               "$b \\times s \\times h$ values", "$c = a + b$ adds two vectors",
               "pays $M$ message latencies", "$m$ microbatches per step", "$D_\\text{GPU}$ tokens per GPU",
               "$D$ training tokens"]

DIAGRAMS_WITH_FORMULAS = [
    "```\nrank 0  │ W_0 (out/t) │  ->  Y_0 = X W_0^T + b_0\n```",
    "```\nstep j (j = 0 .. n-2):  rank r sends chunk (r - j - 1) mod n\n```",
    "```\nstage 0 ──► stage 1 ──► ... ──► stage p-1: loss\n```",
    "```\np = 4, m = 6       warm-up\n```",
    "```\n    X enters through f: dX = Σ_r dY_r W_r\n```",
]
DIAGRAMS_WITHOUT = [
    "```\n    rank 0  │     W_0     │  ──►  Y_0, the first block of features\n```",
    "```\n  step 0    sends c2        sends c0\n            gets  c1 += .   gets  c2 += .\n```",
    "```\n4 stages, 6 microbatches   warm-up   steady (1F1B)\nstage 0:   F0 F1 F2   F3 B0 F4 B1\n```",
    "```python\nx = 2 * (n - 1) / n\n```",
]

#: (detector, texts it must flag, texts it must pass): plain formulas against LaTeX, code and prose;
#: symbol clashes against the notation table's own symbols; formulas in diagrams against their labels.
DETECTOR_CASES = [(plain_formulas, FORMULAS, PROSE), (symbol_clashes, CLASHES, NOT_CLASHES),
                  (diagram_formulas, DIAGRAMS_WITH_FORMULAS, DIAGRAMS_WITHOUT)]


@pytest.mark.parametrize("detector, text", [(detector, text) for detector, flagged, _ in DETECTOR_CASES
                                            for text in flagged])
def test_detector_flags(detector, text):
    assert detector(text), f"{detector.__name__} found nothing in {text!r}"


@pytest.mark.parametrize("detector, text", [(detector, text) for detector, _, passed in DETECTOR_CASES
                                            for text in passed])
def test_detector_passes(detector, text):
    assert detector(text) == []


def test_prose_blanks_code_and_maths_but_keeps_lines():
    text = "a `x*y` b $x^2$ c\n```\nz = 2(n-1)/n\n```\n$$\nS/T\n$$\nd"
    stripped = prose(text)
    assert stripped.count("\n") == text.count("\n")
    assert stripped.split() == ["a", "b", "c", "d"]


# --- the notebooks -------------------------------------------------------------------------

def test_every_notebook_is_read():
    names = {path.parent.name if path.parent.name != "notebooks" else path.stem for path in NOTEBOOKS}
    assert {"00_start_here", "10_expert_3d_and_strategy", "lab01_tensor_parallel", "lab06_expert_parallel"} <= names
    assert len(NOTEBOOKS) == 11 + 2 * len(list((ROOT / "solutions").glob("*/*.ipynb")))


def _notebook_param(path: Path):
    return pytest.param(path, id=str(path.relative_to(ROOT)))


@pytest.mark.parametrize("path", [_notebook_param(path) for path in NOTEBOOKS])
def test_markdown_formulas_are_latex_in_the_course_notation(path):
    hits = notebook_hits(path)
    assert not hits, "plain-text formulas or symbol clashes:\n" + "\n".join(map(str, hits))
