"""Which of the package's files one gateway chat request runs code in: the gateway's app over
the fake pool and embedder (``skillgraft.testing``), one grafted chat after a first request,
every Python call traced. ``python scripts/request_files.py`` prints the count and the files."""
import sys, threading, tempfile
from pathlib import Path
from fastapi.testclient import TestClient
from skillgraft.gateway.app import create_app
from skillgraft.gateway.service import Gateway
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine, FakePool
MANUAL = ("Squashing commits with git: run git rebase -i HEAD~N, mark every commit but the first "
          "as squash, save, and edit the combined message. " * 4)
home = Path(tempfile.mkdtemp())
engine, embedder = FakeEngine(), FakeEmbedder()
with SkillMemory(home, engine=engine, embedder=embedder) as m:
    m.add_manual("git-squash", MANUAL, examples=["how do I squash my last commits?"])
gateway = Gateway(home, FakePool(engine), embedder=embedder)
root = str(Path(__import__("skillgraft").__file__).parent)
seen = set()
def tracer(frame, event, arg):
    f = frame.f_code.co_filename
    if f.startswith(root):
        seen.add(f[len(root) + 1:])
    return None
body = {"model": "fake-chatml", "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "how do I squash commits?"}], "max_tokens": 8}
threading.setprofile(tracer)
with TestClient(create_app(gateway), base_url="http://127.0.0.1") as http:
    http.post("/v1/chat/completions", json={**body, "messages": body["messages"][:1] + [{"role": "user", "content": "hello"}]})
    seen.clear()
    sys.setprofile(tracer)
    r = http.post("/v1/chat/completions", json=body)
    sys.setprofile(None); threading.setprofile(None)
    assert r.status_code == 200, r.text
gateway.close()
files = sorted(f for f in seen if not f.startswith("testing/"))
print(len(files), "files in", len({f.split("/")[0] for f in files if "/" in f}), "packages")
print("\n".join(files))
