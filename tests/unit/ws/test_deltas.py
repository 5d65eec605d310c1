"""The delta rule: when a streamed reply's text is posted (plain functions, no AWS)."""

from __future__ import annotations

import pytest

from embedded.clock import FakeClock
from embedded.services.bedrock_stream import tokens
from lambdas.ws.deltas import MAX_CHARS, MAX_WAIT_SECONDS, DeltaCoalescer

REPLY = (
    "Frieren: Beyond Journey's End follows an elf mage after her party has defeated the Demon King. "
    "Volume 3 came out in March and the collector's edition ships with a slipcase! "
    "Would you like me to check whether it ships to Osaka before the weekend? "
    "I can also compare it with the standard edition, which is a little cheaper."
)


def posts(coalescer: DeltaCoalescer, pieces: list[str], clock: FakeClock | None = None, step: float = 0.0) -> list[str]:
    """Every batch the coalescer posts for ``pieces`` (``step`` seconds apart), the rest included."""
    out = []
    for piece in pieces:
        if clock is not None:
            clock.advance(step)
        batch = coalescer.add(piece)
        if batch is not None:
            out.append(batch)
    rest = coalescer.rest()
    return [*out, rest] if rest is not None else out


def test_the_first_text_is_posted_at_once() -> None:
    coalescer = DeltaCoalescer(clock=FakeClock())
    assert coalescer.add("Fri") == "Fri"
    assert coalescer.add("eren") is None


def test_a_whole_reply_posts_per_sentence_far_fewer_times_than_tokens_and_loses_nothing() -> None:
    # Given a reply of about 80 tokens arriving faster than the wait (a fast model)
    pieces = tokens(REPLY)
    clock = FakeClock()
    batches = posts(DeltaCoalescer(clock=clock), pieces, clock, step=0.01)
    # Then the batches join to the reply, and there are about as many as sentences, not tokens
    assert "".join(batches) == REPLY
    assert len(pieces) >= 70
    assert len(batches) <= len(pieces) // 10
    assert batches[0] == pieces[0]
    assert all(b.rstrip().endswith((".", "!", "?")) for b in batches[1:])


def test_a_reply_written_at_once_is_its_first_words_then_a_frame_per_two_sentences() -> None:
    # Given a reply of 548 characters in six sentences, its tokens arriving all at once
    reply = (
        "Good news: the collector's edition of volume 3 is in stock, with the slipcase and the art "
        "card. Orders placed before 2 pm usually ship the same day, so Osaka by the weekend is likely "
        "but not guaranteed; the checkout page shows the delivery estimate for your address. If you "
        "enjoyed the quiet, reflective tone, you might also like Mushishi (episodic, gentle, complete "
        "in 10 volumes) or Yokohama Kaidashi Kikou. Would you like me to check which of those are in "
        "stock in a collector's or deluxe edition, or compare prices between the editions for you?"
    )
    clock = FakeClock()
    batches = posts(DeltaCoalescer(clock=clock), tokens(reply), clock, step=0.0)
    # Then the first token goes out alone, and the rest in two frames of two sentences or so,
    # each at least 200 characters and ending a sentence: 3 posts for 146 tokens
    assert "".join(batches) == reply
    assert [len(b) for b in batches] == [4, 262, 282]
    assert all(b.rstrip().endswith((".", "?")) for b in batches[1:])


def test_a_long_sentence_is_cut_at_the_character_cap() -> None:
    clock = FakeClock()
    sentence = "x" * 3 + " word" * 200
    batches = posts(DeltaCoalescer(clock=clock), tokens(sentence), clock, step=0.0)
    assert "".join(batches) == sentence
    assert all(len(b) <= MAX_CHARS + 4 for b in batches)
    assert len(batches) >= len(sentence) // (MAX_CHARS + 4)


def test_a_slow_model_posts_whatever_waited_the_maximum() -> None:
    # Given a model writing one token every 0.1 s, no sentence end in sight
    clock = FakeClock()
    coalescer = DeltaCoalescer(clock=clock)
    coalescer.add("A")
    clock.advance(0.1)
    assert coalescer.add(" slow") is None
    clock.advance(0.1)
    assert coalescer.add(" model") is None
    # When the oldest buffered text (" slow", 0.1 s old) has waited the maximum
    clock.advance(MAX_WAIT_SECONDS - 0.1)
    # Then it goes out with the text that arrives
    assert coalescer.add(" writes") == " slow model writes"


def test_a_short_sentence_end_is_not_posted_on_its_own() -> None:
    clock = FakeClock()
    coalescer = DeltaCoalescer(clock=clock, min_sentence_chars=24)
    coalescer.add("See")
    assert coalescer.add(" vol.") is None  # too short to be worth a frame
    assert coalescer.add(" 3, which is out now in every edition.") == " vol. 3, which is out now in every edition."


def test_japanese_sentence_ends_count() -> None:
    coalescer = DeltaCoalescer(clock=FakeClock(), min_sentence_chars=4)
    coalescer.add("はい")
    assert coalescer.add("、第3巻は発売中です。") == "、第3巻は発売中です。"


def test_the_text_is_the_whole_reply_and_rest_is_none_when_nothing_waits() -> None:
    coalescer = DeltaCoalescer(clock=FakeClock())
    for piece in ("Hi", "", " there"):
        coalescer.add(piece)
    assert coalescer.text == "Hi there"
    assert coalescer.rest() == " there"
    assert coalescer.rest() is None
    assert coalescer.posts == 2


@pytest.mark.parametrize(
    "options", [{"max_chars": 0}, {"min_sentence_chars": 200, "max_chars": 100}, {"max_wait_seconds": -1}]
)
def test_fails_with_bounds_that_cannot_hold(options: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="need max_chars"):
        DeltaCoalescer(**options)  # type: ignore[arg-type]
