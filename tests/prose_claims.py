"""Numbers a chapter's prose states right after a measurement, and whether the run backs them.

A measurement cell is a code cell that times, benchmarks or runs ranks (:data:`MEASURES`).
In the markdown cell right after it, a *claim* is a number with a unit of a measured
quantity (%, "x faster", GB/s, ms, ...; :data:`CLAIM`). A claim is *backed* when the
measurement cell's output (the CPU run's) shows the same number at the claim's precision,
or when its sentence is sourced or modelled rather than measured (a citation, a datasheet,
"the model predicts", a formula in ``$...=...$``, a named product's rated figure such as
"450 GB/s per direction on H100 NVLink"; :data:`SOURCED`), or when the
allow-list names it (:data:`ALLOWED`, each with its reason). Anything else is a number a
reader on another backend (GPU/NCCL instead of CPU/gloo) would not see: reword it to hold
on both, or print it from the run.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

#: Code that measures: timers, the course's benchmarks, ranks.
MEASURES = re.compile(r"perf_counter|time\.time\(|timeit|bench\.|collectives_bench|\bcb\.|\bpool\b|Pool\(|"
                      r"%%rank|run_ranks|measure|\.launch\(")
#: A number with a unit of a measured quantity (the number is group "value").
CLAIM = re.compile(
    r"(?<![\w.$^_{])(?P<value>\d+(?:,\d{3})*(?:\.\d+)?)\s*"
    r"(?P<unit>%|(?:x|×|times)(?=\s*(?:faster|slower|more|fewer|less|higher|lower|as\b|[,.;:)]|$))|GB/s|Gb/s|MB/s|GiB/s|TFLOP/s|GFLOP/s|ms\b|us\b|µs\b|μs\b|ns\b|s\b|seconds\b)")
#: A sentence that states a sourced or modelled number, not a measured one.
SOURCED = re.compile(r"arXiv|datasheet|data sheet|the model predicts|the model says|predicted|"
                     r"\$[^$]*=[^$]*\$|\d\s*=\s*\d|according to|published|specification|nccl-tests|\bpeak\b|"
                     r"H100|A100|B200|V100|NVLink|InfiniBand|\bNDR\b|\bHDR\b|PCIe|Gen[3-6]\b", re.I)
#: (chapter file name, words of the sentence) -> why that claim needs no measurement.
ALLOWED = {
    ("01_clusters_and_metrics.ipynb", "an efficiency above 100% means"):
        "a bound the reader compares with, not a result",
    ("06_data_parallelism.ipynb", "Tables like the following circulate in tutorials"):
        "a quoted table that the chapter goes on to check with the model",
}
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z$(*])|\n\s*\n|\n\s*[-*] ")


@dataclass(frozen=True)
class Claim:
    """A number stated in prose next to a measurement, that the measurement does not show."""

    chapter: str
    cell: int
    text: str
    sentence: str

    def __str__(self) -> str:
        return f"{self.chapter}, markdown cell {self.cell}: {self.text!r} in {self.sentence!r}"


def output_text(cell: dict) -> str:
    """What a code cell printed or displayed as text."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append("".join(output.get("text", "")))
        else:
            data = output.get("data", {})
            for mime in ("text/plain", "text/markdown", "text/html"):
                if mime in data:
                    parts.append("".join(data[mime]))
    return "\n".join(parts)


def _value(text: str) -> float:
    return float(text.replace(",", ""))


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def shown_in(value_text: str, unit: str, output: str) -> bool:
    """True when ``output`` shows ``value_text`` at its precision (a percentage also as a fraction)."""
    claimed, tolerance = _value(value_text), 0.5 * 10 ** -_decimals(value_text) + 1e-12
    for number in _NUMBER.findall(output):
        shown = _value(number)
        candidates = (shown, shown * 100) if unit == "%" else (shown,)
        if any(abs(candidate - claimed) <= tolerance for candidate in candidates):
            return True
    return False


def _allowed(chapter: str, sentence: str) -> bool:
    return any(name == chapter and words in sentence for name, words in ALLOWED)


def unbacked_claims(chapter: str, cells: list[dict]) -> list[Claim]:
    """The claims of ``cells`` (an executed notebook's) that neither the run nor a source backs."""
    cells = [cell for cell in cells  # papermill's injected cell: not in the chapter's source
             if "injected-parameters" not in cell.get("metadata", {}).get("tags", [])]
    found = []
    for index in range(1, len(cells)):
        before, cell = cells[index - 1], cells[index]
        if cell["cell_type"] != "markdown" or before["cell_type"] != "code":
            continue
        if not MEASURES.search("".join(before["source"])):
            continue
        output = output_text(before)
        for sentence in _SENTENCE_END.split("".join(cell["source"])):
            if SOURCED.search(sentence) or _allowed(chapter, sentence):
                continue
            for match in CLAIM.finditer(sentence):
                if not shown_in(match["value"], match["unit"], output):
                    found.append(Claim(chapter, index, match.group(0), " ".join(sentence.split())))
    return found
