"""The fenced blocks of a page, as the steps a reader would paste, in page order.

What runs:

* ``bash`` / ``sh`` / ``shell`` blocks: shell code. A run of ``#`` lines right under a code line
  (no blank line between) is what that code prints, checked; a ``#`` line after a blank line, or
  at the top of a block, is only a comment. The code above a run, back to the previous run, is
  one step.
* ``console`` blocks, and unlabelled blocks whose first line starts with ``$ ``: a transcript.
  Each ``$ `` line (with its ``\\`` continuations) is a step, the lines under it its output. A
  transcript may show a command failing: its exit status is not checked, its output is.
* ``python`` blocks: a script, run with ``python`` in the page's directory. An unlabelled,
  ``text`` or ``json`` block right after a code block (only blank lines between) is the output
  of that code, checked.
* ``toml`` blocks are parsed (a TOML file the reader copies must at least be TOML).

Marks, an HTML comment on the line just before the fence (a reader does not see them):

* ``<!-- docs: not run: REASON -->`` — the block is left out, with its reason (rare: a second
  machine, an install, the test suite itself).
* ``<!-- docs: output -->`` — the block is the output of the code block before it.
* ``<!-- docs: file NAME -->`` — the block is a file the page tells the reader to save: it is
  written to NAME in the page's directory, where later blocks read it.

Anything else (a command's synopsis, a directory tree, a systemd unit) is text, not run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["Block", "Step", "parse_page", "steps_of"]

StepKind = Literal["shell", "console", "python", "file", "toml"]

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+|~~~+)(?P<info>[^`]*)$")
_MARK = re.compile(r"^<!--\s*docs:\s*(?P<mark>.*?)\s*-->\s*$")
_SHELLS = {"bash", "sh", "shell"}
_OUTPUTS = {"", "text", "json", "jsonc"}


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, its text and where it starts (the line after the fence)."""

    page: str
    line: int
    lang: str
    text: str
    mark: str | None
    after_code: bool  # only blank lines between this block and the previous fenced block


@dataclass(frozen=True)
class Step:
    """Something the runner does: run code, or write a file, and maybe check what it printed."""

    page: str
    line: int
    kind: StepKind
    code: str
    expected: str | None = None
    expected_line: int | None = None
    name: str | None = None  # a file step's file name

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def parse_page(path: Path, page: str) -> list[Block]:
    """Every fenced block of the page at ``path`` (named ``page`` in messages)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    previous_end: int | None = None  # index of the closing fence of the previous block
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        fence = match["fence"]
        lang = match["info"].strip().split(" ")[0].lower()
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        mark = None
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        if before >= 0 and (found := _MARK.match(lines[before].strip())):
            mark = found["mark"]
            before -= 1
            while before >= 0 and not lines[before].strip():
                before -= 1
        after_code = previous_end is not None and before == previous_end
        blocks.append(Block(page, start + 2, lang, "\n".join(body), mark, after_code))
        previous_end = i
        i += 1
    return blocks


def _is_transcript(block: Block) -> bool:
    first = next((line for line in block.text.split("\n") if line.strip()), "")
    return block.lang == "console" or (block.lang == "" and first.startswith("$ "))


def _shell_steps(block: Block) -> list[Step]:
    steps: list[Step] = []
    code: list[str] = []
    code_line = block.line
    lines = block.text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        is_output = (
            line.startswith("#")
            and i > 0
            and lines[i - 1].strip() != ""
            and not lines[i - 1].lstrip().startswith("#")
            and any(part.strip() for part in code)
        )
        if not is_output:
            if not code:
                code_line = block.line + i
            code.append(line)
            i += 1
            continue
        output_line = block.line + i
        output: list[str] = []
        while i < len(lines) and lines[i].startswith("#"):
            output.append(re.sub(r"^# ?", "", lines[i]))
            i += 1
        steps.append(
            Step(block.page, code_line, "shell", "\n".join(code), "\n".join(output), output_line)
        )
        code = []
    if any(part.strip() and not part.lstrip().startswith("#") for part in code):
        steps.append(Step(block.page, code_line, "shell", "\n".join(code)))
    return steps


def _transcript_steps(block: Block) -> list[Step]:
    steps: list[Step] = []
    lines = block.text.split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise ValueError(
                f"{block.page}:{block.line + i}: a transcript line that is neither a $ command "
                "nor the output of one"
            )
        line = block.line + i
        command = [lines[i][2:]]
        while command[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            command.append(lines[i])
        i += 1
        output_line = block.line + i
        output: list[str] = []
        while i < len(lines) and not lines[i].startswith("$ "):
            output.append(lines[i])
            i += 1
        expected = "\n".join(output).strip("\n")
        steps.append(
            Step(block.page, line, "console", "\n".join(command), expected or None, output_line)
        )
    return steps


def steps_of(blocks: list[Block]) -> tuple[list[Step], list[tuple[Block, str]]]:
    """The steps the blocks make, and the blocks marked not run with their reasons."""
    steps: list[Step] = []
    not_run: list[tuple[Block, str]] = []
    for block in blocks:
        mark = block.mark or ""
        if mark.startswith("not run"):
            reason = mark.partition(":")[2].strip()
            if not reason:
                raise ValueError(f"{block.page}:{block.line}: 'not run' needs a reason")
            not_run.append((block, reason))
            continue
        if mark.startswith("file "):
            name = mark.removeprefix("file ").strip()
            steps.append(Step(block.page, block.line, "file", block.text + "\n", name=name))
            continue
        if mark and mark != "output":
            raise ValueError(f"{block.page}:{block.line}: unknown docs mark {mark!r}")
        output = mark == "output" or (block.after_code and block.lang in _OUTPUTS and steps)
        if output and not _is_transcript(block):
            # what the code above printed, then maybe a transcript that goes on from there
            lines = block.text.split("\n")
            cut = next((i for i, line in enumerate(lines) if line.startswith("$ ")), len(lines))
            last = steps[-1]
            if last.expected is not None or last.kind not in ("shell", "python"):
                raise ValueError(
                    f"{block.page}:{block.line}: an output block after code that has one"
                )
            printed = "\n".join(lines[:cut])
            steps[-1] = Step(
                last.page, last.line, last.kind, last.code, printed, block.line, last.name
            )
            if cut < len(lines):
                rest = Block(
                    block.page, block.line + cut, "console", "\n".join(lines[cut:]), None, False
                )
                steps.extend(_transcript_steps(rest))
            continue
        if block.lang in _SHELLS:
            steps.extend(_shell_steps(block))
        elif _is_transcript(block):
            steps.extend(_transcript_steps(block))
        elif block.lang == "python":
            steps.append(Step(block.page, block.line, "python", block.text + "\n"))
        elif block.lang == "toml":
            steps.append(Step(block.page, block.line, "toml", block.text + "\n"))
    return steps, not_run
