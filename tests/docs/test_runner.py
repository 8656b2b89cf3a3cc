"""The docs runner itself: a page that does not work fails, naming its line; one that works
passes."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.docs._expect import fits
from tests.docs._markdown import parse_page, steps_of
from tests.docs.test_pages import run_page


def _page(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "pages"
    root.mkdir()
    (root / "page.md").write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def test_shell_comments_under_code_are_its_output_and_marks_are_read(tmp_path: Path) -> None:
    root = _page(
        tmp_path,
        """\
        ```bash
        # a comment, not output
        echo one
        # one
        echo two
        ```

        <!-- docs: not run: needs a second machine -->
        ```bash
        ssh elsewhere
        ```

        ```
        $ echo three
        three
        ```
        """,
    )
    steps, not_run = steps_of(parse_page(root / "page.md", "page.md"))
    assert [(s.kind, s.line, s.expected) for s in steps] == [
        ("shell", 2, "one"),
        ("shell", 5, None),
        ("console", 14, "three"),
    ]
    assert [reason for _, reason in not_run] == ["needs a second machine"]


def test_output_fits_with_wildcards_and_what_varies() -> None:
    assert fits(
        '{"id": "…", "at": "2026-01-01T00:00:00Z", …}', '{"id":"x","at":"2027-05-05T10:00:01.5Z"}'
    )
    assert fits("http://127.0.0.1:8000/a  # a note", "http://127.0.0.1:39999/a")
    assert not fits('{"state": "succeeded"}', '{"state":"failed"}')
    assert fits("3", "total\n3\n") and not fits("3", "13")  # whole lines
    assert fits('{"a": 1,\n "b": 2}', '{"a":1,"b":2}')  # wrapped on the page only


def test_a_failing_command_fails_its_page_at_its_line(tmp_path: Path) -> None:
    root = _page(
        tmp_path,
        """\
        Text.

        ```bash
        true
        false
        echo never
        ```
        """,
    )
    with pytest.raises(pytest.fail.Exception, match=r"page.md:5: false"):
        run_page("page.md", tmp_path, root=root)


def test_an_output_that_differs_fails_and_background_processes_are_stopped(
    tmp_path: Path,
) -> None:
    root = _page(
        tmp_path,
        """\
        ```bash
        sleep 600 &
        echo $! > sleeper.pid
        timeout 600 sleep 600 &
        echo $! > timeout.pid
        echo hello
        # goodbye
        ```
        """,
    )
    with pytest.raises(pytest.fail.Exception, match=r"differs from the page's \(line 7\)"):
        run_page("page.md", tmp_path, root=root)
    for name in ("sleeper.pid", "timeout.pid"):  # timeout runs in a process group of its own
        pid = int((tmp_path / name).read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_page_that_works_passes(tmp_path: Path) -> None:
    root = _page(
        tmp_path,
        """\
        <!-- docs: file hello.py -->
        ```python
        print("hello from a file")
        ```

        ```bash
        python hello.py
        # hello from a file
        X=42
        ```

        ```python
        import os
        print(len(os.listdir(".")) > 0)
        ```

        ```
        True
        ```

        ```
        $ echo "$X"
        42
        ```
        """,
    )
    run_page("page.md", tmp_path, root=root)
