"""embedded.texts: the texts inside what a stage holds (the story's erasure and privacy tests walk whole stages)."""

from __future__ import annotations

import base64
import gzip
import zlib

from embedded.texts import readable, unpacked


def test_packed_bytes_are_read_as_text() -> None:
    assert unpacked(b"plain") == "plain"
    assert unpacked(gzip.compress(b"a gzip object")) == "a gzip object"
    assert unpacked(zlib.compress(b"a stored turn")) == "a stored turn"
    assert unpacked(b"\xff not utf-8") == "\ufffd not utf-8"


def test_every_text_inside_an_item_is_found_binary_and_nested_ones_too() -> None:
    item = {
        "PK": {"S": "SESSION#s-1"},
        "content": {"B": base64.b64encode(zlib.compress(b"her words")).decode()},
        "raw": b"bytes",
        "turns": {"L": [{"M": {"text": {"S": "nested"}}}]},
        "count": {"N": "3"},
        "not_base64": {"B": "***"},
    }
    texts = list(readable(item))
    assert {"SESSION#s-1", "her words", "bytes", "nested", "3"} <= set(texts)
    assert "***" in texts  # a value that is not base64 is still read as the string it is
