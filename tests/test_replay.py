"""gateway.replay and ``python -m gateway replay``: judging recorded transcripts offline.

The fixtures under tests/fixtures/transcripts/ are F04 and F06 of docs/field-cases.md written in the
transcript format documented in gateway/replay.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from gateway.errors import TranscriptError
from gateway.replay import Verdict, replay

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "transcripts"
F04 = FIXTURES / "f04_cancel_then_completed.jsonl"
F06 = FIXTURES / "f06_artifacts.jsonl"


def line(obj: dict) -> str:
    return orjson.dumps(obj).decode()


def run(lines: list[str]) -> list[Verdict]:
    return list(replay(lines))


def verdicts_of(path: Path) -> list[Verdict]:
    with path.open(encoding="utf-8") as fh:
        return list(replay(fh))


def numbered_json_lines(path: Path) -> list[int]:
    text = path.read_text(encoding="utf-8").splitlines()
    return [i for i, t in enumerate(text, 1) if t.strip() and not t.lstrip().startswith("#")]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, check=False)


GET_T5 = {"kind": "response", "method": "GetTask", "params": {"id": "t-5"},
          "result": {"id": "t-5", "contextId": "c-5", "status": {"state": "TASK_STATE_COMPLETED"}}}
FOLLOW_UP_T5 = {"kind": "request", "method": "SendMessage",
                "params": {"message": {"messageId": "m-11", "role": "ROLE_USER", "taskId": "t-5",
                                       "contextId": "c-5", "parts": [{"text": "one more thing"}]}}}


class TestF04Fixture:
    def test_f04_fixture_yields_one_verdict_per_observation_with_its_line_number(self):
        verdicts = verdicts_of(F04)
        assert [v.line for v in verdicts] == numbered_json_lines(F04)
        assert [v.kind for v in verdicts] == ["event", "event", "request", "response", "event",
                                              "event", "event", "request", "response"]

    def test_f04_fixture_actions(self):
        """Cancel and the CANCELED event pass; the late artifact and COMPLETED are dropped."""
        actions = [v.action for v in verdicts_of(F04)]
        assert actions == ["forward", "forward", "forward", "forward", "forward",
                           "drop", "drop", "forward", "forward"]

    def test_f04_fixture_findings_on_the_dropped_events(self):
        verdicts = verdicts_of(F04)
        assert sorted(verdicts[5].findings) == ["divergence:artifact_after_terminal",
                                                "divergence:event_after_terminal"]
        assert sorted(verdicts[6].findings) == ["divergence:event_after_terminal",
                                                "divergence:terminal_regression"]

    def test_f04_fixture_later_get_task_is_corrected_to_canceled(self):
        last = verdicts_of(F04)[-1]
        assert last.result["status"]["state"] == "TASK_STATE_CANCELED"
        assert [a["artifactId"] for a in last.result["artifacts"]] == ["a-3"]


class TestF06Fixture:
    def test_f06_fixture_actions(self):
        actions = [v.action for v in verdicts_of(F06)]
        assert actions == ["forward", "forward", "drop", "forward", "forward", "forward"]
        assert verdicts_of(F06)[2].findings == ["divergence:artifact_after_last_chunk"]

    def test_f06_fixture_get_task_holds_a6_with_two_parts(self):
        last = verdicts_of(F06)[-1]
        assert last.result["artifacts"] == [
            {"artifactId": "a-6", "parts": [{"text": "Hel"}, {"text": "lo"}]},
            {"artifactId": "a-7", "parts": [{"text": "x"}]},
        ]


class TestReplay:
    def test_comments_and_blank_lines_are_skipped_but_counted(self):
        verdicts = run(["# header", "", line(GET_T5), "   ", line(FOLLOW_UP_T5)])
        assert [v.line for v in verdicts] == [3, 5]

    def test_the_ledger_carries_between_lines(self):
        """F05 (a) offline: after a COMPLETED answer, a follow-up message is rejected -32004."""
        verdicts = run([line(GET_T5), line(FOLLOW_UP_T5)])
        assert verdicts[1].action == "reject"
        assert verdicts[1].error is not None and verdicts[1].error[0] == -32004
        assert verdicts[1].findings == ["rejection:terminal_task"]

    def test_each_upstream_has_its_own_ledger(self):
        other = {**FOLLOW_UP_T5, "upstream": "worker-b"}
        assert run([line(GET_T5), line(other)])[1].action == "forward"

    def test_mode_observe_on_a_line_forwards(self):
        observed = {**FOLLOW_UP_T5, "mode": "observe"}
        verdict = run([line(GET_T5), line(observed)])[1]
        assert verdict.action == "forward"
        assert verdict.findings == ["rejection:terminal_task"]

    def test_the_method_decides_the_version(self):
        v03 = {"kind": "response", "method": "tasks/get", "params": {"id": "t-1"},
               "result": {"kind": "task", "id": "t-1", "contextId": "c-1",
                          "status": {"state": "TASK_STATE_WORKING"}}}
        verdict = run([line(v03)])[0]
        assert verdict.result["status"]["state"] == "working"
        assert verdict.findings == ["normalization:v10_enum"]

    def test_render_names_line_kind_method_action_findings_and_error(self):
        text = run([line(GET_T5), line(FOLLOW_UP_T5)])[1].render()
        assert text.startswith("2: request SendMessage -> reject [rejection:terminal_task] ")
        assert "error -32004: " in text

    def test_render_appends_the_forwarded_result_as_json(self):
        text = run([line(GET_T5)])[0].render()
        prefix = "1: response GetTask -> forward "
        assert text.startswith(prefix)
        assert orjson.loads(text[len(prefix):]) == GET_T5["result"]
    def test_events_of_one_stream_share_state_even_when_they_repeat_params(self):
        params = {"message": {"messageId": "m-4", "role": "ROLE_USER", "parts": [{"text": "x"}]}}

        def event(result: dict) -> str:
            return line({"kind": "event", "stream": "s", "method": "SendStreamingMessage",
                         "params": params, "result": result})

        verdicts = run([
            event({"task": {"id": "t-4", "contextId": "c-4",
                            "status": {"state": "TASK_STATE_WORKING"}}}),
            event({"statusUpdate": {"taskId": "t-4", "contextId": "c-4",
                                    "status": {"state": "TASK_STATE_COMPLETED"}}}),
            event({"statusUpdate": {"taskId": "t-4", "contextId": "c-4",
                                    "status": {"state": "TASK_STATE_WORKING"}}}),
        ])
        assert [v.action for v in verdicts] == ["forward", "forward", "drop"]
        assert "divergence:event_after_terminal" in verdicts[2].findings


class TestTranscriptErrors:
    @pytest.mark.parametrize(("bad", "needle"), [
        ("{not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        (line({"kind": "request", "method": "tasks/frobnicate", "params": {}}), "method"),
        (line({"kind": "request", "params": {"id": "t-1"}}), "method"),
        (line({"kind": "answer", "method": "GetTask", "params": {"id": "t-1"}}), "kind"),
        (line({"kind": "response", "method": "GetTask", "params": {"id": "t-1"}}), "result"),
        (line({"kind": "exchange", "method": "GetTask", "params": {"id": "t-1"}, "worker": [{"wat": 1}]}),
         "cannot answer Post"),
        (line({"kind": "exchange", "method": "SendMessage",
               "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}},
               "worker": [{"end": True}]}), "cannot answer Post"),
        (line({"kind": "exchange", "method": "GetTask", "params": {"id": "t-1"},
               "worker": [{"answer": {}, "status": "abc"}]}), "cannot answer Post"),
        (line({"kind": "exchange", "method": "GetTask", "params": {"id": "t-1"},
               "worker": [{"fail": "bogus"}]}), "cannot answer Post"),
    ])
    def test_a_malformed_line_raises_naming_its_line_number(self, bad, needle):
        with pytest.raises(TranscriptError, match=r"^line 3: ") as info:
            run(["# ok", line(GET_T5), bad])
        assert needle in str(info.value)

    def test_lines_before_the_bad_one_are_still_judged(self):
        """replay() is lazy: the verdicts before a malformed line come out first."""
        gen = replay([line(GET_T5), "{bad"])
        assert next(gen).line == 1
        with pytest.raises(TranscriptError):
            next(gen)
    def test_an_invalid_mode_is_a_transcript_error(self):
        with pytest.raises(TranscriptError, match=r"^line 1: "):
            run([line({**GET_T5, "mode": "enforcing"})])


class TestReplayCli:
    def test_cli_replays_the_f04_fixture(self):
        proc = cli("replay", str(F04))
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout.splitlines()
        expected = verdicts_of(F04)
        assert out == [v.render() for v in expected]
        assert [o.split(":", 1)[0] for o in out] == [str(n) for n in numbered_json_lines(F04)]
        assert " -> drop " in out[5] and " -> drop " in out[6]
        assert '"TASK_STATE_CANCELED"' in out[-1]
        assert proc.stderr == ""

    def test_cli_replays_the_f06_fixture(self):
        proc = cli("replay", str(F06))
        assert proc.returncode == 0, proc.stderr
        actions = [o.split(" -> ")[1].split(" ")[0] for o in proc.stdout.splitlines()]
        assert actions == ["forward", "forward", "drop", "forward", "forward", "forward"]

    def test_cli_malformed_transcript_exits_2_naming_the_line(self, tmp_path):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(line(GET_T5) + "\n# fine\n{oops\n", encoding="utf-8")
        proc = cli("replay", str(bad))
        assert proc.returncode == 2
        assert "line 3" in proc.stderr
        assert str(bad) in proc.stderr
        assert proc.stdout.splitlines()[0].startswith("1: response GetTask -> forward")

    def test_cli_missing_file_exits_2(self, tmp_path):
        proc = cli("replay", str(tmp_path / "absent.jsonl"))
        assert proc.returncode == 2
        assert "absent.jsonl" in proc.stderr


class TestReplayExchanges:
    def test_f08ii_fixture_lists_what_the_client_receives(self):
        [verdict] = verdicts_of(FIXTURES / "f08_cut_probe_resubscribe.jsonl")
        assert verdict.kind == "exchange" and verdict.action == "forward"
        states = [next(iter(o["result"].values())).get("status", {}).get("state") for o in verdict.outputs]
        assert states == ["TASK_STATE_WORKING", None, "TASK_STATE_COMPLETED"]

    def test_an_event_for_a_stream_that_has_ended_is_a_transcript_error(self):
        params = {"message": {"kind": "message", "messageId": "m", "role": "user", "parts": []}}

        def event(result: dict) -> str:
            return line({"kind": "event", "stream": "s", "method": "message/stream", "params": params,
                         "result": result})

        ids = {"taskId": "t-e", "contextId": "c"}
        lines = [event({"kind": "task", "id": "t-e", "contextId": "c", "status": {"state": "working"}}),
                 event({"kind": "status-update", **ids, "status": {"state": "input-required"}, "final": True}),
                 event({"kind": "status-update", **ids, "status": {"state": "completed"}, "final": True})]
        with pytest.raises(TranscriptError, match="line 3: stream 's' ended at line 2"):
            run(lines)

    def test_a_transcript_carries_no_time_so_no_heartbeat_probe(self):
        """Many lines later a follow-up to a live task goes to the worker as it is: no GetTask
        comes first (it would have taken the scripted answer)."""
        working = {**GET_T5, "result": {**GET_T5["result"], "status": {"state": "TASK_STATE_WORKING"}}}
        answer = {"jsonrpc": "2.0", "id": 1, "result": {"task": working["result"]}}
        follow_up = {**FOLLOW_UP_T5, "kind": "exchange", "worker": [{"answer": answer}]}
        verdicts = run([line(working), *["# filler"] * 100, line(follow_up)])
        assert verdicts[1].action == "forward" and verdicts[1].outputs == [answer]


class TestGenerationsFixture:
    """tests/fixtures/transcripts/generations_gap_and_regression.jsonl (docs/resume.md §3): the
    worker's first act of a line that owes a GetTask is the probe's answer, so the documents
    the client receives show whether exactly one GetTask came first."""

    PATH = FIXTURES / "generations_gap_and_regression.jsonl"

    def test_every_line_is_forwarded_and_only_the_step_back_is_a_divergence(self):
        verdicts = verdicts_of(self.PATH)
        assert [v.line for v in verdicts] == numbered_json_lines(self.PATH)
        assert [v.action for v in verdicts] == ["forward"] * 6
        assert [v.findings for v in verdicts] == [[], [], [], [], ["divergence:generation_regression"], []]

    def test_the_gap_is_delivered_then_one_get_task_precedes_the_follow_up(self):
        stream, follow_up, again, *_ = verdicts_of(self.PATH)
        assert [next(iter(o["result"].values()))["generation"] for o in stream.outputs] == ["1", "2", "4"]
        # the probe took the first act; the client got the SendMessage answer, with its own id
        assert follow_up.outputs == [{"jsonrpc": "2.0", "id": 2, "result": {"task": {
            "id": "t-7", "contextId": "c-7", "status": {"state": "TASK_STATE_WORKING"}, "generation": "5"}}}]
        # nothing owed any more: the one act is the SendMessage answer
        assert again.outputs[0]["id"] == 3 and again.outputs[0]["result"]["task"]["generation"] == "6"

    def test_the_step_back_is_delivered_and_the_cancel_is_preceded_by_one_get_task(self):
        *_, back, cancel = verdicts_of(self.PATH)
        assert back.result["statusUpdate"]["generation"] == "5"
        assert cancel.outputs == [{"jsonrpc": "2.0", "id": 4, "result": {
            "id": "t-7", "contextId": "c-7", "status": {"state": "TASK_STATE_CANCELED"}, "generation": "7"}}]
