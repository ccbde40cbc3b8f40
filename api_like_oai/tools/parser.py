"""The incremental tool-call parser: fed the model's text as it arrives, it gives out content and
tool-call deltas, holding text back while it could still be the start of a marker.

    parser = ToolCallParser(FORMATS["hermes"], {"get_weather"})
    parser.feed('Sure. <tool_')          -> ["Sure. "]
    parser.feed('call>{"name": "get_w')  -> []
    parser.feed('eather", "arguments": {"city": "Paris"}}</tool_call>')
        -> [ToolCallDelta(0, id="call_…", name="get_weather"), ToolCallDelta(0, arguments='{"city": "Paris"}')]
    parser.finish()                      -> []

A call is given out only once it is known to be one: its name complete and among the tools, and
its JSON complete and valid, unless `stream_arguments` (the output is held to the call's shape by a
grammar), when the first call's arguments are given out as they are written. What turns out not to
be a call (broken JSON, an unknown name) comes back as content. The arguments are the model's own
text of the arguments object, so what was streamed is always a prefix of the final arguments; only
what `JsonPrefix` can close is streamed, and a streamed call the output ends inside is closed with
it (`call_cut`), since its start cannot be taken back: a call's arguments are always JSON.

A call that repeats an earlier one of the same answer word for word is not given out: small models
held to a grammar that allows parallel calls tend to write the same call again and again, and
`repeating` tells the caller to end the generation there.
"""

from __future__ import annotations

import json
import secrets
import string
from dataclasses import dataclass

from .formats import ARGUMENT_KEYS, ToolFormat
from .json_prefix import IN_STRING, STRING_RUN, JsonPrefix
from .scan import MATCH, PARTIAL, ObjectScan, match_sequence, partial_suffix

_ID_ALPHABET = string.ascii_letters + string.digits
# Random bytes below 248 (4 x 62) map evenly onto the alphabet; the others are dropped.
_ID_BYTES = bytes.maketrans(bytes(range(248)), (_ID_ALPHABET * 4).encode())
_ID_DROPPED = bytes(range(248, 256))


def new_call_id() -> str:
    """An OpenAI-style tool call id: call_ and 24 letters or digits, uniformly random (one read of
    the system's randomness, where secrets.choice per letter made 24 and cost 20 times more)."""
    while True:
        letters = secrets.token_bytes(32).translate(_ID_BYTES, _ID_DROPPED)
        if len(letters) >= 24:  # 32 draws keep fewer than 24 about once in a million
            return "call_" + letters[:24].decode()


@dataclass(slots=True, unsafe_hash=True)  # not frozen, as GenerationEvent (backends/events.py): one per token
class ToolCallDelta:
    """A piece of one tool call: the first carries its id and name, the others arguments text. `cut`:
    the closing of arguments the end of the output cut short (their JSON closed for a client to parse:
    a prefix of what the model meant, never to be run; services/mcp_loop.py)."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    cut: bool = False


CONTENT, OPENING, OBJECT, CLOSING, BETWEEN = "content", "opening", "object", "closing", "between"


class ToolCallParser:
    def __init__(self, tool_format: ToolFormat, tool_names, *, stream_arguments: bool = False, new_id=new_call_id):
        self.format = tool_format
        self.tool_names = frozenset(tool_names)
        self.stream_arguments = stream_arguments
        self.new_id = new_id
        self.stage = CONTENT
        self.buffer = ""  # received, not yet given out or consumed
        self.attempt = ""  # the consumed text of the call being read, returned as content if it fails
        self.attempt_trigger = ""  # the trigger that began it (given out as content on failure)
        self.scan: ObjectScan | None = None
        self.calls_made = 0
        self.repeating = False  # the model wrote a call it had already written
        self.calls_seen: set[tuple[str, str]] = set()
        self.started_call: ToolCallDelta | None = None  # the call given out while still being written
        self.streamed_arguments = ""
        self.arguments_check = JsonPrefix()  # how much of the started call's arguments may be given out
        self.call_cut = False  # a started call was closed by the end of the output, not by the model
        self.output_began = False  # start triggers count only before any other text
        self.after_call = False  # whitespace between and after calls is not content
        self.in_argument_string = False  # inside a string of the started call's arguments, all given out
        self.in_held_string = False  # inside a string of a call held back until it is whole
        self.out: list = []
        self.stages = {
            CONTENT: self._content_stage,
            OPENING: self._opening,
            OBJECT: self._object,
            CLOSING: self._closing,
            BETWEEN: self._between,
        }

    # --- the interface ----------------------------------------------------------------------

    def feed(self, text: str) -> list:
        """Content strings and ToolCallDeltas, in order, for this much more of the output."""
        self.out = []
        if (
            self.stage == CONTENT
            and not self.buffer
            and not self.after_call
            and self.output_began
            and not any(trigger[0] in text for trigger in self.format.triggers)
        ):
            return [text] if text else []  # the common case: plain text, no marker in sight
        if self.in_argument_string and STRING_RUN.fullmatch(text):
            return [self._string_run(text)]  # the common token of a streamed call: more of a string
        if self.in_held_string and STRING_RUN.fullmatch(text):
            self.scan.string_run(text)  # the common token of a held call: more of a string, nothing out yet
            return []
        self.buffer += text
        self._advance(final=False)
        self.in_argument_string = self._inside_argument_string()
        self.in_held_string = not self.in_argument_string and self._inside_held_string()
        return self.out

    def finish(self) -> list:
        """What is left once the output ended: held-back text, or a call the end cut short."""
        self.out = []
        self.in_argument_string = self.in_held_string = False
        self._advance(final=True)
        if self.stage == OBJECT and self.started_call is not None:
            self._close_cut_call()
            self.scan, self.attempt, self.attempt_trigger, self.stage = None, "", "", CONTENT
        elif self.stage == OBJECT:
            self._fail()
            self._advance(final=True)
        elif self.stage == CONTENT and self.buffer and not (self.after_call and self.buffer.isspace()):
            self._content(self.buffer)
        self.buffer = ""
        return self.out

    # --- stages -----------------------------------------------------------------------------

    def _advance(self, final: bool) -> None:
        while self.stages[self.stage](final):
            pass

    def _content(self, text: str) -> None:
        if not text:
            return
        if self.after_call and text.isspace():
            return
        self.after_call = False
        self.output_began = True
        if self.out and isinstance(self.out[-1], str):
            self.out[-1] += text
        else:
            self.out.append(text)

    def _content_stage(self, final: bool) -> bool:
        buffer = self.buffer
        if not self.output_began and self.format.start_triggers:
            stripped = buffer.lstrip()
            if not stripped:
                return False
            if any(stripped.startswith(trigger) for trigger in self.format.start_triggers):
                self._begin_attempt("", buffer[: len(buffer) - len(stripped)], stripped)
                self.stage = OBJECT
                return True
            if any(trigger.startswith(stripped) for trigger in self.format.start_triggers) and not final:
                return False
            self.output_began = True
        found = [(buffer.find(trigger), trigger) for trigger in self.format.triggers]
        found = [(position, trigger) for position, trigger in found if position >= 0]
        if found:
            position, trigger = min(found)
            self._content(buffer[:position])
            self._begin_attempt(trigger, "", buffer[position + len(trigger) :])
            self.stage = OPENING
            return True
        keep_from = len(buffer) if final else partial_suffix(buffer, self.format.triggers)
        if self.after_call and buffer[:keep_from].isspace() and not final:
            return False  # whitespace after a call waits to see what follows it
        self._content(buffer[:keep_from])
        self.buffer = buffer[keep_from:]
        return False

    def _opening(self, final: bool) -> bool:
        return self._expect(self.format.opening, OBJECT, final)

    def _object(self, final: bool) -> bool:
        if self.scan is None:
            self.scan = ObjectScan()
        scan = self.scan
        scan.feed(self.buffer)
        self.buffer = ""
        if scan.broken:
            return self._fail()
        if scan.end is None:
            self._stream_open_call()
            return False
        self.buffer = scan.text[scan.end :]
        self.attempt += scan.text[: scan.end]
        self.scan = None
        if not self._finish_call(scan):
            return self._fail()
        self.stage = CLOSING
        return True

    def _closing(self, final: bool) -> bool:
        return self._expect(self.format.closing, BETWEEN, final, lenient=True)

    def _between(self, final: bool) -> bool:
        self.attempt, self.attempt_trigger = "", ""
        if self.format.separator is not None:
            status, end = match_sequence(self.format.separator, self.buffer, 0)
            if status == MATCH:
                self.attempt, self.buffer = self.buffer[:end], self.buffer[end:]
                self.stage = OBJECT
                return True
            if status == PARTIAL and not final:
                return False
        status, end = match_sequence(self.format.section_end, self.buffer, 0)
        if status == PARTIAL and not final:
            return False
        if status == MATCH:
            self.buffer = self.buffer[end:]
        self.stage = CONTENT
        self.after_call = True
        return True

    # --- helpers ----------------------------------------------------------------------------

    def _expect(self, pieces: tuple, next_stage: str, final: bool, lenient: bool = False) -> bool:
        status, end = match_sequence(pieces, self.buffer, 0)
        if status == MATCH:
            self.attempt += self.buffer[:end]
            self.buffer = self.buffer[end:]
            self.stage = next_stage
            return True
        if status == PARTIAL and not final:
            return False
        if lenient:  # a finished call whose closing marker is missing or cut off is still a call
            if status == PARTIAL:
                self.buffer = ""
            self.stage = next_stage
            return True
        return self._fail()

    def _begin_attempt(self, trigger: str, consumed: str, rest: str) -> None:
        self.attempt_trigger = trigger
        self.attempt = trigger + consumed
        self.buffer = rest
        self.output_began = True

    def _fail(self) -> bool:
        """Not a call after all: its text comes back as content, and scanning resumes after its trigger."""
        scanned = self.scan.text if self.scan is not None else ""
        trigger = self.attempt_trigger
        rest = self.attempt[len(trigger) :] + scanned + self.buffer
        self.scan = None
        self.after_call = False
        self._content(trigger)
        self.attempt, self.attempt_trigger = "", ""
        self.buffer = rest
        if self.started_call is not None:
            self._close_cut_call()  # a grammar-held call cannot be taken back; it ends here
        self.stage = CONTENT
        self.output_began = True
        if not trigger and rest:
            self._content(rest[0])  # progress: the failed text cannot trigger the same attempt again
            self.buffer = rest[1:]
        return True

    def _stream_open_call(self) -> None:
        if not self.stream_arguments or self.calls_made:
            return  # later calls wait until complete: they may repeat an earlier one
        scan = self.scan
        if self.started_call is None:
            name = _json_string(scan.value_text("name"))
            if name not in self.tool_names:
                return
            self.started_call = ToolCallDelta(self.calls_made, self.new_id(), name)
            self.out.append(self.started_call)
        for key in ARGUMENT_KEYS:
            arguments = scan.open_value(key)
            if arguments is not None and arguments.startswith("{"):
                self._stream_arguments(self._checked(arguments))

    def _inside_argument_string(self) -> bool:
        """Whether the next token, if it holds no quote, backslash or control character, is simply
        more of a string inside the started call's arguments, streamed whole as it is (`_string_run`):
        the scan and the check both inside that string, everything before it given out."""
        scan, check = self.scan, self.arguments_check
        return (
            self.stage == OBJECT
            and self.started_call is not None
            and scan is not None
            and scan.in_string
            and not scan.escaped
            and not scan.broken
            and scan.depth > 1
            and scan.value_start is not None
            and check.state == IN_STRING
            and not check.escape
            and not check.broken
            and check.length == scan.position - scan.value_start == len(self.streamed_arguments)
            and not self.buffer
        )

    def _inside_held_string(self) -> bool:
        """Whether the next token, if it holds no quote, backslash or control character, is only more of
        a string inside a call that is not streamed (later calls, calls without a grammar, a name not
        yet known): it changes nothing the scan looks for, and nothing is given out until the call ends."""
        scan = self.scan
        return (
            self.stage == OBJECT
            and self.started_call is None
            and scan is not None
            and scan.in_string
            and not scan.escaped
            and not scan.broken
            and not self.buffer
        )

    def _string_run(self, text: str) -> ToolCallDelta:
        """What the whole parse would give out for `text` inside the arguments' string: itself."""
        self.scan.string_run(text)
        self.arguments_check.string_run(len(text))
        streamed, self.streamed_arguments = self.streamed_arguments, ""  # grown in place: see ObjectScan._take
        streamed += text
        self.streamed_arguments = streamed
        return ToolCallDelta(self.calls_made, arguments=text)

    def _checked(self, arguments_so_far: str) -> str:
        """The part of the arguments written so far that may be given out: valid JSON so far, ending
        where closing it adds no key or value of its own (a member waits until its value begins)."""
        check = self.arguments_check
        check.feed(arguments_so_far[check.length :])
        return arguments_so_far[: check.safe_end]

    def _close_cut_call(self) -> None:
        """End the started call the output stopped inside: what was given out cannot be taken back,
        so its arguments are closed into a JSON object (a client's json.loads must read a finished
        call), and the call is marked cut (its finish reason is never "tool_calls")."""
        closing = self.arguments_check.closing() if self.streamed_arguments else "{}"
        if closing:  # none when the arguments were whole and only the call's own closing was cut
            self.out.append(ToolCallDelta(self.calls_made, arguments=closing, cut=True))
        self.calls_made += 1  # its index is taken
        self.call_cut = True
        self._end_started_call()

    def _end_started_call(self) -> None:
        self.started_call = None
        self.streamed_arguments = ""
        self.arguments_check = JsonPrefix()

    def _stream_arguments(self, arguments_so_far: str) -> None:
        new_text = arguments_so_far[len(self.streamed_arguments) :]
        if new_text:
            self.out.append(ToolCallDelta(self.calls_made, arguments=new_text))
            self.streamed_arguments = arguments_so_far

    def _finish_call(self, scan: ObjectScan) -> bool:
        """Give out the finished call (or its rest); False if the object is not a call to a known tool."""
        call = scan.parsed()
        if call is None or call.get("name") not in self.tool_names:
            return False
        arguments = _arguments_text(call, scan)
        if arguments is None:
            return False
        signature = (call["name"], _canonical(arguments))
        if signature in self.calls_seen:
            self.repeating = True
            return True
        self.calls_seen.add(signature)
        if self.started_call is None:
            self.out.append(ToolCallDelta(self.calls_made, self.new_id(), call["name"]))
            self._stream_arguments(arguments)
        elif arguments.startswith(self.streamed_arguments):
            self._stream_arguments(arguments)
        self.calls_made += 1
        self._end_started_call()
        return True


def _canonical(arguments: str) -> str:
    return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))


def _json_string(raw: str | None) -> str | None:
    if raw is None or not raw.startswith('"'):
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _arguments_text(call: dict, scan: ObjectScan) -> str | None:
    """The call's arguments as a JSON object's text: the model's own text, "{}" when it wrote none;
    a JSON string holding an object is unwrapped; anything else is not a call (None)."""
    for key in ARGUMENT_KEYS:
        if key not in call:
            continue
        value = call[key]
        if isinstance(value, dict):
            return scan.value_text(key)
        if isinstance(value, str):
            try:
                return value if isinstance(json.loads(value), dict) else None
            except ValueError:
                return None
        return None
    return "{}"
