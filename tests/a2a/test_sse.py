"""gateway.a2a.sse: the incremental SSE decoder and encoder (WHATWG rules; F08, F09)."""

from __future__ import annotations

import pytest

from gateway.a2a.sse import (
    Comment,
    Event,
    EventTooLargeError,
    SSEDecoder,
    encode_comment,
    encode_event,
)

TASK = ('{"jsonrpc":"2.0","id":8,"result":{"task":{"id":"t-8","contextId":"c-8",'
        '"status":{"state":"TASK_STATE_WORKING"}}}}')
DONE = ('{"jsonrpc":"2.0","id":8,"result":{"statusUpdate":{"taskId":"t-8","contextId":"c-8",'
        '"status":{"state":"TASK_STATE_COMPLETED"}}}}')


def feed_all(data: bytes, **kw) -> list[Event | Comment]:
    return SSEDecoder(**kw).feed(data)


def feed_bytewise(data: bytes) -> list[Event | Comment]:
    dec = SSEDecoder()
    out: list[Event | Comment] = []
    for i in range(len(data)):
        out += dec.feed(data[i : i + 1])
    return out


def feed_split(data: bytes, cuts: list[int]) -> list[Event | Comment]:
    dec = SSEDecoder()
    out: list[Event | Comment] = []
    bounds = [0, *cuts, len(data)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        out += dec.feed(data[a:b])
    return out


class TestLineEndings:
    @pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
    def test_each_line_ending_dispatches_the_same_event(self, eol):
        """WHATWG: lines end in CRLF, LF or CR; the SDK sends CRLF (docs/protocol.md §7)."""
        raw = b"data: " + TASK.encode() + eol + eol
        assert feed_all(raw) == [Event(TASK)]

    def test_mixed_line_endings_in_one_stream(self):
        raw = b"data: a\r\n\r\ndata: b\n\ndata: c\r\rdata: d\r\n\n"
        assert feed_all(raw) == [Event("a"), Event("b"), Event("c"), Event("d")]

    def test_crlf_split_between_chunks_is_one_line_ending(self):
        """A CR at the end of one read and its LF at the start of the next are one EOL."""
        dec = SSEDecoder()
        assert dec.feed(b"data: a\r") == []
        assert dec.feed(b"\ndata: b\r") == []
        assert dec.feed(b"\n\r") == [Event("a\nb")]  # the blank line's CR dispatches
        assert dec.feed(b"\n") == []  # ...and its LF is not a second blank line

    def test_cr_then_cr_across_chunks_is_a_blank_line(self):
        dec = SSEDecoder()
        assert dec.feed(b"data: a\r") == []
        assert dec.feed(b"\r") == [Event("a")]
    def test_an_empty_read_between_cr_and_lf_changes_nothing(self):
        dec = SSEDecoder()
        out = dec.feed(b"data: a\r") + dec.feed(b"") + dec.feed(b"\ndata: b\n\n")
        assert out == [Event("a\nb")]


STREAMS = [
    # F08 (i) first frame + a complete second frame, CRLF as the SDK sends it.
    ("data: " + TASK + "\r\n\r\ndata: " + DONE + "\r\n\r\n").encode(),
    # F09: id/event/retry lines, a ping comment, an event split mid-JSON, CR-only endings.
    (": ping - 2026-01-01\r\nid: 1\revent: message\rretry: 1500\rdata: {\"a\":\r"
     "data: 1}\r\r: keepalive\n\nevent: error\ndata: x\n\n").encode(),
    # multi-byte UTF-8 and an empty data line
    "data: héllo ✓\ndata:\ndata:  two spaces\n\n".encode(),
]


class TestChunkBoundaries:
    @pytest.mark.parametrize("raw", STREAMS)
    def test_byte_by_byte_gives_the_same_events_as_one_read(self, raw):
        """F09: an event split across reads is reassembled and produced once."""
        whole = feed_all(raw)
        assert whole  # the input does produce something
        assert feed_bytewise(raw) == whole

    def test_one_read_of_many_events_in_mixed_line_ends_gives_each_in_order(self):
        """The decoder turns CR and CRLF into LF per read; a CR ending one read may pair with
        the next read's LF, and a CR run is that many line ends."""
        ends = [b"\n\n", b"\r\n\r\n", b"\r\r", b"\r\n\r", b"\n\r\n", b"\r\r\n", b"\n\r"]
        raw = b"".join(b"data: " + str(i).encode() + ends[i % 7] + b": c" + ends[i % 7][-1:]
                       for i in range(30))
        want = [item for i in range(30) for item in (Event(str(i)), Comment("c"))]
        assert feed_all(raw) == want
        assert feed_bytewise(raw) == want
        cuts = [i + 1 for i, b in enumerate(raw) if b == 0x0D]  # every read ends in a CR
        assert feed_split(raw, cuts) == want

    @pytest.mark.parametrize("raw", STREAMS)
    def test_every_two_way_split_gives_the_same_events(self, raw):
        whole = feed_all(raw)
        for cut in range(1, len(raw)):
            assert feed_split(raw, [cut]) == whole, cut

    def test_split_in_the_middle_of_json_is_delivered_once(self):
        raw = ("data: " + TASK + "\n\n").encode()
        cut = raw.index(b"contextId")
        dec = SSEDecoder()
        assert dec.feed(raw[:cut]) == []
        assert dec.feed(raw[cut:]) == [Event(TASK)]

    def test_utf8_character_split_across_reads_decodes_whole(self):
        raw = "data: ✓\n\n".encode()
        cut = raw.index("✓".encode()) + 1
        assert feed_split(raw, [cut]) == [Event("✓")]


class TestFields:
    def test_multi_line_data_is_joined_with_lf(self):
        assert feed_all(b"data: one\ndata: two\ndata: three\n\n") == [Event("one\ntwo\nthree")]

    def test_id_event_retry_fields(self):
        out = feed_all(b"id: 42\nevent: error\nretry: 3000\ndata: {}\n\n")
        assert out == [Event("{}", event="error", id="42", retry=3000)]

    def test_one_leading_space_is_stripped_from_values(self):
        assert feed_all(b"data:x\n\ndata:  y\n\n") == [Event("x"), Event(" y")]

    def test_field_without_colon_has_empty_value(self):
        """WHATWG: a line with no colon is a field name with an empty value."""
        assert feed_all(b"data\ndata\n\n") == [Event("\n")]

    def test_unknown_fields_are_ignored(self):
        assert feed_all(b"foo: bar\ndata: x\n\n") == [Event("x")]

    def test_non_numeric_retry_is_ignored(self):
        assert feed_all(b"retry: soon\ndata: x\n\n") == [Event("x")]

    def test_id_with_nul_is_ignored(self):
        assert feed_all(b"id: a\x00b\ndata: x\n\n") == [Event("x")]

    def test_event_without_data_is_not_dispatched(self):
        """WHATWG: an empty data buffer dispatches nothing, and the event type resets."""
        assert feed_all(b"event: ping\n\ndata: x\n\n") == [Event("x")]

    def test_extra_blank_lines_dispatch_nothing(self):
        assert feed_all(b"\n\n\r\n\ndata: x\n\n\n\n") == [Event("x")]
    def test_non_ascii_digit_retry_is_ignored(self):
        """WHATWG: retry is used only if it consists of ASCII digits."""
        assert feed_all("retry: ²\ndata: x\n\n".encode()) == [Event("x")]
    def test_leading_bom_is_stripped(self):
        assert feed_all("\ufeffdata: x\n\n".encode()) == [Event("x")]


class TestComments:
    def test_comment_is_a_comment_never_an_event(self):
        """F09: comments never become events."""
        out = feed_all(b": ping\n\n")
        assert out == [Comment("ping")]
        assert not any(isinstance(x, Event) for x in out)

    def test_bare_colon_is_an_empty_comment(self):
        assert feed_all(b":\n") == [Comment("")]

    def test_comment_inside_an_event_does_not_split_it(self):
        out = feed_all(b"data: a\n: keepalive\ndata: b\n\n")
        assert out == [Comment("keepalive"), Event("a\nb")]

    def test_comments_and_events_keep_stream_order(self):
        out = feed_all(b": one\n\ndata: x\n\n: two\n\n")
        assert out == [Comment("one"), Event("x"), Comment("two")]


class TestSizeCap:
    def test_an_oversized_event_raises(self):
        """F09: each event has a size cap; passing it raises EventTooLargeError."""
        dec = SSEDecoder(max_event_bytes=64)
        with pytest.raises(EventTooLargeError):
            dec.feed(b"data: " + b"x" * 100 + b"\n\n")

    def test_an_oversized_unterminated_line_raises_before_its_end(self):
        """A line that never ends cannot grow the buffer without bound."""
        dec = SSEDecoder(max_event_bytes=64)
        with pytest.raises(EventTooLargeError):
            for _ in range(10):
                dec.feed(b"data: " + b"y" * 20)

    def test_many_small_lines_of_one_event_count_together(self):
        dec = SSEDecoder(max_event_bytes=64)
        with pytest.raises(EventTooLargeError):
            dec.feed(b"data: 0123456789\n" * 8)

    def test_events_under_the_cap_pass_and_the_count_resets_per_event(self):
        dec = SSEDecoder(max_event_bytes=64)
        line = b"data: " + b"z" * 40 + b"\n\n"
        assert dec.feed(line * 5) == [Event("z" * 40)] * 5

    def test_error_is_a_value_error(self):
        assert issubclass(EventTooLargeError, ValueError)


class TestFlush:
    def test_f08_dangling_final_frame_is_offered_at_eof(self):
        """F08 (i): the last frame lacks its blank line; flush() hands it to the caller."""
        dec = SSEDecoder()
        raw = ("data: " + TASK + "\n\ndata: " + DONE).encode()
        assert dec.feed(raw) == [Event(TASK)]
        assert dec.has_pending
        assert dec.flush() == Event(DONE)

    def test_f08_dangling_frame_with_a_final_newline_is_offered(self):
        dec = SSEDecoder()
        assert dec.feed(("data: " + DONE + "\n").encode()) == []
        assert dec.has_pending
        assert dec.flush() == Event(DONE)

    def test_flush_after_a_complete_stream_gives_nothing(self):
        dec = SSEDecoder()
        dec.feed(("data: " + TASK + "\n\n").encode())
        assert not dec.has_pending
        assert dec.flush() is None

    def test_flush_of_a_dangling_comment_gives_no_event(self):
        dec = SSEDecoder()
        dec.feed(b"data: x\n\n: ping")
        assert dec.flush() is None

    def test_flush_resets_the_decoder(self):
        dec = SSEDecoder()
        dec.feed(b"data: a")
        assert dec.flush() == Event("a")
        assert not dec.has_pending
        assert dec.flush() is None
        assert dec.feed(b"data: b\n\n") == [Event("b")]


class TestEncode:
    @pytest.mark.parametrize("data", ["x", TASK, "a\nb", "a\r\nb\rc", "", "trailing\n"])
    def test_every_frame_ends_with_a_blank_line(self, data):
        """F08: every frame the gateway writes ends with a blank line."""
        frame = encode_event(data)
        assert frame.endswith(b"\n\n")
        assert b"\r" not in frame

    @pytest.mark.parametrize("data", ["x", TASK, "a\nb", "", "trailing\n", "ünï ✓"])
    @pytest.mark.parametrize("fields", [{}, {"event": "error"}, {"id": "7", "retry": 10}])
    def test_encoded_frames_round_trip_through_the_decoder(self, data, fields):
        frame = encode_event(data, **fields)
        assert SSEDecoder().feed(frame) == [Event(data, **fields)]

    def test_cr_and_crlf_in_data_become_lf_after_a_round_trip(self):
        assert SSEDecoder().feed(encode_event("a\r\nb\rc")) == [Event("a\nb\nc")]

    def test_bytes_data_is_accepted(self):
        assert SSEDecoder().feed(encode_event(DONE.encode())) == [Event(DONE)]

    def test_multi_line_data_becomes_several_data_lines(self):
        assert encode_event("a\nb") == b"data: a\ndata: b\n\n"

    def test_comment_frame_round_trips_as_a_comment(self):
        frame = encode_comment("keepalive")
        assert frame == b": keepalive\n\n"
        assert SSEDecoder().feed(frame) == [Comment("keepalive")]

    def test_a_newline_cannot_escape_a_comment(self):
        """A comment text with a newline stays one comment and never injects an event."""
        out = SSEDecoder().feed(encode_comment("a\ndata: evil"))
        assert all(isinstance(x, Comment) for x in out)
