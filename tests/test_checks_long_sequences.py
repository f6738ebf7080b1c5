"""labutils.checks.long_sequences: chapter 8's recomputation and context-parallel self-checks."""
from __future__ import annotations

from labutils.checks import long_sequences as check


def verdict(fn, answer, capsys) -> str:
    fn(answer)
    return capsys.readouterr().out.strip()


def test_selective_memory(capsys):
    sbh = 2048 * 1 * 12288
    assert verdict(check.selective_memory, 34 * sbh, capsys).startswith("correct")
    assert "wrong unit" in verdict(check.selective_memory, 34 * sbh / 1e9, capsys)
    assert "without recomputation" in verdict(check.selective_memory, sbh * (34 + 5 * 96 * 2048 / 12288), capsys)
    assert "what it keeps" in verdict(check.selective_memory, 5 * 96 * 2048**2, capsys)
    assert "full recomputation" in verdict(check.selective_memory, 2 * sbh, capsys)
    assert verdict(check.selective_memory, 12345, capsys).startswith("not quite")


def test_ring_bytes(capsys):
    kv = 2 * 131072 * 4096 * 2
    assert verdict(check.ring_bytes, 7 / 8 * kv, capsys).startswith("correct")
    assert "(n-1)/n" in verdict(check.ring_bytes, kv, capsys)
    assert "both K and V" in verdict(check.ring_bytes, 7 / 16 * kv, capsys)
    assert "Ulysses" in verdict(check.ring_bytes, 4 * 7 / 64 * kv / 2, capsys)
    assert verdict(check.ring_bytes, None, capsys) == "not answered yet"
