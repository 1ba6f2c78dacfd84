"""Binary wheels built by scripts/build_wheels.py (Zig cross-compiling, no Docker):
each is checked with auditwheel, the aarch64 one for its ELF machine too, and the
x86_64 manylinux wheel is installed into a fresh venv and serves a request."""

import subprocess
import sys
import venv
import zipfile

import httpx
import pytest

from tests.support.harness import ROOT, free_port, port_open, wait_for, zigcorn_only
from tests.support.tools import require_module

pytestmark = [zigcorn_only, pytest.mark.every_python]
require_module("ziglang")

VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
ABI = f"cp{sys.version_info.major}{sys.version_info.minor}"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheels")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_wheels.py"), "--pythons", VERSION,
                           "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return {w.name: w for w in out.glob("*.whl")}


def test_one_wheel_per_target_with_the_right_tags(wheels):
    """One wheel for each of the three targets, tagged for this interpreter.

    Slow: the module's `wheels` fixture, whose time is counted here, cross-compiles the
    engine with Zig for three targets (about 25 s each, the compiler being single-threaded
    for most of it), which is what the wheels ship."""
    assert sorted(wheels) == sorted([
        f"zigcorn-0.1.0-{ABI}-{ABI}-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        f"zigcorn-0.1.0-{ABI}-{ABI}-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
        f"zigcorn-0.1.0-{ABI}-{ABI}-musllinux_1_2_x86_64.whl",
    ])


@pytest.mark.parametrize("platform", ["manylinux_2_17_x86_64", "manylinux_2_17_aarch64", "musllinux_1_2_x86_64"])
def test_auditwheel_agrees_with_each_tag(wheels, platform):
    require_module("auditwheel")
    (wheel,) = [w for name, w in wheels.items() if platform in name]
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(wheel)], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert f'consistent with the following platform tag: "{platform}"' in text, text


def test_the_aarch64_engine_is_an_aarch64_elf(wheels):
    (wheel,) = [w for name, w in wheels.items() if "aarch64" in name]
    with zipfile.ZipFile(wheel) as zf:
        (so,) = [n for n in zf.namelist() if n.endswith(".so")]
        header = zf.read(so)[:20]
    assert so == f"zigcorn/_core.cpython-{ABI[2:]}-aarch64-linux-gnu.so"
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64


def test_the_x86_64_wheel_installs_and_serves(wheels, tmp_path):
    (wheel,) = [w for name, w in wheels.items() if "manylinux_2_17_x86_64" in name]
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, timeout=300)
    where = subprocess.run([python, "-c", "import zigcorn._core, zigcorn; print(zigcorn.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert where.returncode == 0 and str(env_dir) in where.stdout, where.stdout + where.stderr
    port = free_port()
    app = tmp_path / "wheelapp.py"
    app.write_text(
        "async def app(scope, receive, send):\n"
        "    if scope['type'] == 'http':\n"
        "        await send({'type': 'http.response.start', 'status': 200, 'headers': []})\n"
        "        await send({'type': 'http.response.body', 'body': b'from the wheel'})\n"
    )
    proc = subprocess.Popen([env_dir / "bin" / "zigcorn", "wheelapp:app", "--port", str(port), "--loop", "asyncio"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: port_open(port), 15)
        assert httpx.get(f"http://127.0.0.1:{port}/").text == "from the wheel"
    finally:
        proc.terminate()
        proc.wait(10)
