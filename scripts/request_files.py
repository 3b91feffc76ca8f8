"""Which of the package's files one gateway chat request runs code in, every Python call traced
(the state keeper's and the pool's own threads left out: they are off the answer's path).

``python scripts/request_files.py``: the gateway's app over the fake pool and embedder
(``skillgraft.testing``), one grafted chat after a first request; prints the count and the files.
``python scripts/request_files.py --server``: over a real llama-server and SmolLM2, an agent's
chat asked four times (four wordings of one question); prints each request's count (the
steady state is requests 3 and 4) and request 3's files with the functions called in each."""
import collections
import sys
import tempfile
import threading
from pathlib import Path

from fastapi.testclient import TestClient

from skillgraft.gateway.app import create_app
from skillgraft.gateway.service import Gateway
from skillgraft.memory import SkillMemory

MANUAL = ("Squashing commits with git: run git rebase -i HEAD~N, mark every commit but the first "
          "as squash, save, and edit the combined message. " * 4)
AGENT = "You are a coding agent. Keep changes small and explain each command before you run it. " * 3
QUESTIONS = ["how do I squash commits?", "how do I squash my last two commits?", "how can I squash commits into one?",
             "squash commits how?"]
OFF_THE_PATH = ("skillgraft-state-keeper", "skillgraft-pool")
root = str(Path(__import__("skillgraft").__file__).parent)
seen: set = set()
tracing = [False]


def tracer(frame, event, arg):
    name = frame.f_code.co_filename
    if tracing[0] and name.startswith(root) and not threading.current_thread().name.startswith(OFF_THE_PATH):
        seen.add((name[len(root) + 1:], frame.f_code.co_name))


def files() -> dict:
    """The files traced (not the fakes'), each with the functions called in it."""
    called = collections.defaultdict(set)
    for file, function in seen:
        if not file.startswith("testing/"):
            called[file].add(function)
    return called


def packages(called: dict) -> int:
    return len({file.split("/")[0] for file in called if "/" in file})


def ask(http, body) -> dict:
    seen.clear()
    tracing[0] = True
    reply = http.post("/v1/chat/completions", json=body)
    tracing[0] = False
    assert reply.status_code == 200, reply.text
    return files()


home = Path(tempfile.mkdtemp())
threading.setprofile(tracer)
sys.setprofile(tracer)
if "--server" in sys.argv:
    from skillgraft.gateway.pool import ServerPool

    with SkillMemory(home) as memory:
        memory.add_manual("git-squash", MANUAL, examples=["how do I squash my last commits?"])
    pool = ServerPool(1, 1, model="smollm2-135m")
    gateway = Gateway(home, pool)
    with TestClient(create_app(gateway), base_url="http://127.0.0.1") as http:
        model = http.get("/v1/models").json()["data"][0]["id"]
        for i, question in enumerate(QUESTIONS, 1):
            body = {"model": model, "messages": [{"role": "system", "content": AGENT}, {"role": "user", "content": question}],
                    "max_tokens": 4, "temperature": 0}
            called = ask(http, body)
            print(f"request {i}: {len(called)} files in {packages(called)} packages")
            if i == 3:
                shown = called
    gateway.close()
    pool.close()
    for file in sorted(shown):
        print(f"  {file}: {' '.join(sorted(shown[file]))}")
else:
    from skillgraft.testing import FakeEmbedder, FakeEngine, FakePool

    engine, embedder = FakeEngine(), FakeEmbedder()
    with SkillMemory(home, engine=engine, embedder=embedder) as memory:
        memory.add_manual("git-squash", MANUAL, examples=["how do I squash my last commits?"])
    gateway = Gateway(home, FakePool(engine), embedder=embedder)
    body = {"model": "fake-chatml", "messages": [{"role": "system", "content": "You are terse."},
                                                 {"role": "user", "content": "how do I squash commits?"}], "max_tokens": 8}
    with TestClient(create_app(gateway), base_url="http://127.0.0.1") as http:
        ask(http, {**body, "messages": body["messages"][:1] + [{"role": "user", "content": "hello"}]})
        called = ask(http, body)
    gateway.close()
    print(len(called), "files in", packages(called), "packages")
    print("\n".join(sorted(called)))
sys.setprofile(None)
threading.setprofile(None)
