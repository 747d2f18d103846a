"""docs/credentials-on-your-machine.md, run as written: the page's marked blocks are the test. Each
`terminal` block starts in a bash of its own (the IdP, the two servers, the gateway, from
examples/local-idp/) and is waited for at the URL its marker names; each `run` block goes to one
bash session that keeps its variables, as the reader's terminal does; each `prints` block is compared
with what was printed (`...` stands for what differs each run); each `file` block must be the file
in the repository; each `browser` list is done in Debian's Chromium, step by step as it reads. A
changed command, output, file or page fails here.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page

# work bound, not an event wait: the page, end to end
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "credentials-on-your-machine.md"
PORTS = (9400, 9401, 9402, 9403)  # the page's own: below the tests' port bands (tests/fixtures/ports.py)
MARKER = re.compile(r"<!-- walkthrough: (.+?) -->\n")
FENCE = re.compile(r"```([a-z]*)\n(.*?)```\n", re.S)
TERMINAL = re.compile(r"terminal (\w+), ready when (\S+) answers (\d{3})")
DONE = "__WALKTHROUGH_DONE__"
START_TIMEOUT, RUN_TIMEOUT = 10.0, 10.0


@dataclass(frozen=True)
class Step:
    directive: str  # the marker's text
    body: str  # its fenced block's content, or its list
    line: int  # where the marker is, for messages


def steps(text: str) -> list[Step]:
    """Every marked block of the page, in order; a marker with nothing to mark fails."""
    found = []
    for marker in MARKER.finditer(text):
        line = text.count("\n", 0, marker.start()) + 1
        rest = text[marker.end():]
        if marker.group(1) == "browser":
            items = re.match(r"((?:\d+\. .*\n(?: {3}.*\n)*)+)", rest)
            assert items, f"line {line}: a browser marker needs a numbered list after it"
            found.append(Step("browser", items.group(1), line))
            continue
        fence = FENCE.match(rest)
        assert fence, f"line {line}: {marker.group(1)!r} needs a fenced block right after it"
        found.append(Step(marker.group(1), fence.group(2), line))
    return found


def matches(expected: list[str], printed: list[str]) -> bool:
    """Line by line; `...` in an expected line stands for any text."""
    if len(expected) != len(printed):
        return False
    return all(re.fullmatch(".*".join(map(re.escape, e.split("..."))), p)
               for e, p in zip(expected, printed, strict=True))


def contains(expected: list[str], printed: list[str]) -> bool:
    """The expected lines appear in `printed` in this order (other lines between them)."""
    lines = iter(printed)
    return all(any(matches([e], [p]) for p in lines) for e in expected)


def environment() -> dict[str, str]:
    """The reader's: the virtualenv's bin first on PATH (`. .venv/bin/activate`)."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


@dataclass
class Terminal:
    """A terminal running one block until the test ends: its process group and its output."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> list[str]:
        return self.log.read_text(encoding="utf-8", errors="replace").splitlines()

    def stop(self) -> None:
        """Ctrl-C, as the page says; then kill what is left of its process group."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


class Shell:
    """One bash reading the page's `run` blocks, keeping their variables between blocks. Each block
    runs with its stdin on /dev/null (so nothing it starts reads the next block)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.process = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=ROOT, env=environment(),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.blocks = 0

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def run(self, block: str) -> tuple[list[str], int]:
        """The block's output lines and the status of its last command."""
        self.blocks += 1
        script = self.directory / f"block-{self.blocks}.sh"
        script.write_text(block, encoding="utf-8")
        assert self.process.stdin is not None
        self.process.stdin.write(f"source {script} < /dev/null\necho {DONE} $?\n")
        self.process.stdin.flush()
        printed: list[str] = []
        deadline = time.monotonic() + RUN_TIMEOUT
        while True:
            line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, f"bash ended during:\n{block}\n" + "\n".join(printed)
            if DONE in line:
                before, _, status = line.partition(DONE)
                return printed + ([before] if before else []), int(status)
            printed.append(line)

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@dataclass
class Walkthrough:
    """The page's state as a reader goes through it."""

    directory: Path
    browser: Browser
    shell: Shell
    terminals: dict[str, Terminal] = field(default_factory=dict)
    printed: list[str] = field(default_factory=list)  # the last `run` block's output
    window: BrowserContext | None = None
    page: Page | None = None

    def start(self, step: Step) -> None:
        found = TERMINAL.fullmatch(step.directive)
        assert found, f"line {step.line}: not a terminal marker: {step.directive!r}"
        name, url, status = found.group(1), found.group(2), int(found.group(3))
        log = self.directory / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(["bash", "-c", step.body], cwd=ROOT, env=environment(),
                                       stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        terminal = self.terminals[name] = Terminal(name, process, log)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            try:
                if httpx.get(url, timeout=2).status_code == status:
                    return
            except httpx.HTTPError:
                pass
            assert process.poll() is None, f"{name} exited:\n" + "\n".join(terminal.output())
            time.sleep(0.2)
        raise AssertionError(f"{url} did not answer {status}:\n" + "\n".join(terminal.output()))

    def run(self, step: Step) -> None:
        self.printed, status = self.shell.run(step.body)
        assert status == 0, f"line {step.line}: exit {status}:\n" + "\n".join(self.printed)

    def prints(self, step: Step) -> None:
        expected = step.body.splitlines()
        name = step.directive.removesuffix("prints").strip()  # "prints": the last `run` block
        if not name:
            assert matches(expected, self.printed), (f"line {step.line}: the page shows\n{step.body}"
                                                     "but it printed\n" + "\n".join(self.printed))
            return
        terminal = self.terminals[name]
        deadline = time.monotonic() + 10
        while not contains(expected, terminal.output()):  # waiting for a line it prints
            assert time.monotonic() < deadline, (f"line {step.line}: {name} did not print\n{step.body}"
                                                 "it printed\n" + "\n".join(terminal.output()))
            time.sleep(0.2)

    def browse(self, step: Step) -> None:
        for item in re.split(r"\n(?=\d+\. )", step.body.strip()):
            self.act(" ".join(item.split()), step.line)

    def act(self, item: str, line: int) -> None:
        """One numbered step, read as a person would act on it."""
        done = 0
        if re.match(r"\d+\. Open the link it printed", item):
            links = [p.removeprefix("open: ") for p in self.printed if p.startswith("open: ")]
            assert len(links) == 1, self.printed
            if self.window is None or "private window" in item:
                self.window = self.browser.new_context()
                self.page = self.window.new_page()
            assert self.page is not None
            self.page.goto(links[0])
            done += 1
        page = self.page
        assert page is not None, f"line {line}: nothing is open yet: {item}"
        person = re.search(r"Sign in as \*\*(\w+)\*\*", item)
        if person:
            page.fill('input[name="login"]', person.group(1))
            page.fill('input[name="password"]', "any password")
            done += 1
        for label in re.findall(r"[Cc]lick \*\*([^*]+)\*\*", item):
            control = page.get_by_role("button", name=label, exact=True).or_(
                page.get_by_role("link", name=label, exact=True))  # a button, or a link
            with page.expect_navigation():
                control.click()
            done += 1
        for said in re.findall(r'The page says "([^"]+)"', item):
            assert said in page.locator("body").inner_text(), (item, page.url, page.content()[:2000])
            done += 1
        assert done, f"line {line}: the test does not know how to do this step: {item}"


def ports_free() -> None:
    """The page's ports are free (bound as its servers bind them: a closed one's TIME-WAIT is no
    obstacle), or the test fails saying which is taken."""
    for port in PORTS:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                pytest.fail(f"port {port} is in use: the walkthrough's servers listen on "
                            f"{', '.join(map(str, PORTS))}", pytrace=False)


@pytest.fixture
def walkthrough(tmp_path: Path, browser: Browser) -> Iterator[Walkthrough]:
    ports_free()
    shell = Shell(tmp_path)
    reader = Walkthrough(tmp_path, browser, shell)
    try:
        yield reader
    finally:
        for terminal in reversed(reader.terminals.values()):
            terminal.stop()
        shell.close()
        if reader.window is not None:
            reader.window.close()


def test_every_shell_block_of_the_page_is_run_and_every_file_shown_is_the_repositorys() -> None:
    text = DOC.read_text(encoding="utf-8")
    marked = steps(text)
    shells = [m for m in FENCE.finditer(text) if m.group(1) == "sh"]
    assert len(shells) == sum(s.directive == "run" or s.directive.startswith("terminal ")
                              for s in marked) > 0
    files = [s for s in marked if s.directive.startswith("file ")]
    assert [s.directive for s in files] == ["file examples/local-idp/gateway.toml",
                                            "file examples/local-idp/policy.toml"]
    for step in files:
        assert step.body == (ROOT / step.directive.removeprefix("file ")).read_text(encoding="utf-8")


def test_the_page_runs_as_written(walkthrough: Walkthrough) -> None:
    done: list[str] = []
    for step in steps(DOC.read_text(encoding="utf-8")):
        if step.directive.startswith("terminal "):
            walkthrough.start(step)
        elif step.directive == "run":
            walkthrough.run(step)
        elif step.directive.endswith("prints"):
            walkthrough.prints(step)
        elif step.directive == "browser":
            walkthrough.browse(step)
        else:
            assert step.directive.startswith("file "), f"line {step.line}: unknown {step.directive!r}"
        done.append(step.directive)
    assert done.count("browser") == 2 and done.count("run") >= 8, done
    for terminal in walkthrough.terminals.values():
        output = "\n".join(terminal.output())
        assert "Traceback" not in output, f"{terminal.name}:\n{output}"


@pytest.mark.parametrize(("command", "status", "said"), [
    (["get_token.py"], 2, "get_token.py: error: name a person, or --service URL"),
    (["get_token.py", "--service", "http://127.0.0.1:9402/mcp"], 1,
     "set GW_CLIENT_SECRET: the gateway's client secret at the IdP"),
    (["get_token.py", "alice"], 1, "cannot reach the IdP at http://127.0.0.1:9400: ..."),
    (["call.py", "TOKEN", "notes__whoami", "[1"], 1,
     "the arguments are not a JSON object: Expecting ',' delimiter: line 1 column 3 (char 2)"),
    (["call.py", "TOKEN", "notes__whoami"], 1, "the call to http://127.0.0.1:9401/mcp failed (is the "
     "gateway running?): ConnectError: All connection attempts failed"),
])
def test_the_example_clients_say_what_is_wrong_in_one_line(command: list[str], status: int, said: str
                                                           ) -> None:
    """Nothing listening on the page's ports, no secret set: one line each, never a traceback."""
    ports_free()
    env = {k: v for k, v in environment().items() if k != "GW_CLIENT_SECRET"}
    done = subprocess.run([sys.executable, f"examples/local-idp/{command[0]}", *command[1:]], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=10)
    assert done.returncode == status and done.stdout == "", done
    assert matches([said], done.stderr.splitlines()[-1:]) and "Traceback" not in done.stderr, done.stderr
