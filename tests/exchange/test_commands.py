"""Commands are typed: every one is a :class:`~gateway.exchange.commands.Command` dataclass,
slotted, and a driver refuses anything else (docs/architecture.md, "The exchange layer")."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from gateway.exchange import commands
from gateway.exchange.commands import REPORTS, Answer, Command, Loaded, Post
from gateway.offline import Offline

COMMANDS = [obj for obj in vars(commands).values()
            if inspect.isclass(obj) and issubclass(obj, Command) and obj is not Command]


def test_every_command_is_a_slotted_dataclass_under_the_base() -> None:
    assert {c.__name__ for c in COMMANDS} >= {"Load", "Store", "Post", "Open", "Emit", "Respond", "Enqueue"}
    for cls in COMMANDS:
        assert dataclasses.is_dataclass(cls), cls
        assert "__slots__" in vars(cls), cls
        assert not hasattr(cls(**{f.name: None for f in dataclasses.fields(cls)}), "__dict__"), cls
    assert all(issubclass(c, Command) for c in REPORTS)


def test_replies_are_not_commands() -> None:
    assert not issubclass(Loaded, Command)
    assert not issubclass(Answer, Command)


def test_the_offline_interpreter_refuses_what_is_not_a_command() -> None:
    def exchange():  # type: ignore[no-untyped-def]
        yield Answer(200, b"{}")

    with pytest.raises(TypeError):
        Offline().run(exchange())


def test_replace_keeps_a_command_s_other_fields() -> None:
    post = Post(b"{}", "GET", "/tasks/t1")
    marked = dataclasses.replace(post, reason="restart")
    assert (marked.body, marked.method, marked.target, marked.reason) == (b"{}", "GET", "/tasks/t1", "restart")
    assert post.reason is None
