"""The launcher's wire: named messages that travel as plain tuples, and the checks made before a call."""
import io
import pickle
import socket

import pytest

from labutils.ranks import _messages as messages
from labutils.ranks import _wire
from labutils.ranks.call_args import pickle_call, validate_timeout, validate_world_size

EXAMPLES = [
    messages.RankHello("token", 3, "ctrl"), messages.Started(1234, 5678), messages.StorePort(29500),
    messages.Ready(), messages.RunCall(7, b"payload", {"cwd": "/tmp"}),
    messages.ExecCell(8, "x = 1", "<distributed cell 1>", {}), messages.Exit(), messages.Done(7, b"result"),
    messages.Failed(7, None, "Traceback ...", "builtins.ValueError", "bad shape"),
    messages.TemplateHello(99, "2.13.0", None, False, 12.5, 14.25), messages.Spawn([{"rank": 0}]), messages.Spawned([11, 12]),
    messages.RankExited(11, None, 9), messages.SignalRanks([11, 12], 10),
]


class _BuiltinsOnly(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name}")


def test_every_message_kind_is_named_once():
    assert len(EXAMPLES) == len(messages.BY_KIND)
    assert {type(m) for m in EXAMPLES} == set(messages.BY_KIND.values())


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_a_message_comes_back_as_its_named_type_from_builtin_values_only(message):
    data = _wire.encode(message)
    assert _BuiltinsOnly(io.BytesIO(data)).load() == (message.KIND, *message)  # no class is rebuilt
    back = _wire.decode(data)
    assert type(back) is type(message) and back == message
    assert back._asdict() == message._asdict()


def test_what_is_not_a_message_travels_unchanged():
    for value in [("no such kind", 1), ([1], 2), {"a": 1}, (), 42]:
        assert _wire.decode(_wire.encode(value)) == value


def test_frames_are_read_whole_from_any_split():
    a, b = socket.socketpair()
    with a, b:
        _wire.send(a, messages.Done(1, b"x" * 1000))
        _wire.send(a, messages.Ready())
        data = b.recv(1 << 16)
    reader = _wire.FrameReader()
    got = [m for i in range(len(data)) for m in reader.feed(data[i:i + 1])]
    assert got == [messages.Done(1, b"x" * 1000), messages.Ready()]
    assert got[0].result == b"x" * 1000


def test_failed_compares_type_and_message():
    first = messages.Failed(1, None, "tb 0", "builtins.ValueError", "bad")
    assert first.same_error(messages.Failed(1, None, "tb 1", "builtins.ValueError", "bad"))
    assert not first.same_error(messages.Failed(1, None, "tb 0", "builtins.ValueError", "worse"))


def test_call_arguments_are_checked_before_any_rank_starts():
    assert validate_world_size(4) == 4
    with pytest.raises(TypeError, match="world_size must be an int"):
        validate_world_size(True)
    with pytest.raises(ValueError, match="at least 1"):
        validate_world_size(0)
    assert validate_timeout(2) == 2.0
    with pytest.raises(ValueError, match="positive number of seconds"):
        validate_timeout(-1)
    with pytest.raises(TypeError, match="argument 1 \\(generator\\) cannot be sent"):
        pickle_call(print, (1, (i for i in range(2))), {})
    with pytest.raises(TypeError, match="fn must be callable"):
        pickle_call(3, (), {})


def test_pickled_functions_keep_their_file_name_for_rank_tracebacks():
    import cloudpickle

    def defined_here():
        return 1

    fn, args, kwargs = cloudpickle.loads(pickle_call(defined_here, (), {"k": 1}))
    assert fn.__code__.co_filename == __file__
    assert fn() == 1 and args == () and kwargs == {"k": 1}
