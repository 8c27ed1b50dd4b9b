import subprocess
import sys

import pytest

from benchmarks.batch_throughput import SERVER, bare_modules, batch


@pytest.fixture(scope="module")
def api_base():
    server = subprocess.Popen([sys.executable, "-c", SERVER, "0"], stdout=subprocess.PIPE, text=True)
    try:
        yield f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
    finally:
        server.kill()
        server.wait()
        server.stdout.close()


def test_the_loops_and_dspys_bare_modules_understand_the_benchmarks_server(api_base):
    # `batch` asserts every loop succeeded: the server's answer must parse with the adapter the loops use.
    summary, driver_cpu = batch("asyncio", 4, 8, api_base)
    assert summary.finished == 8 and driver_cpu > 0

    per_second, per_cpu_second = bare_modules(api_base, 4, 8)
    assert per_second > 0 and per_cpu_second > 0
