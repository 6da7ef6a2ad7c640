"""The types: mypy --strict and pyright pass on the examples and on a decorated sync and async
function, and a wrong argument to a decorated function is a type error (not Any)."""
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
EXAMPLES = sorted((HERE.parent.parent / "examples" / "python").glob("*.py"))
TYPED = HERE / "typed_decorator.py"
WRONG = '''import exactly

@exactly.effect("send-invoice", target="customer", inputs=("month",))
def send_invoice(key: str, customer: str, month: str) -> str:
    return key

def main(lease: exactly.Lease) -> None:
    send_invoice(lease, customer="c", month=11)
'''


def _mypy(*files, cwd):
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                           *map(str, files)], capture_output=True, text=True, cwd=cwd, timeout=600)


def _pyright(*files, cwd):
    pyright = pathlib.Path(sys.executable).parent / "pyright"
    return subprocess.run([str(pyright), "--pythonpath", sys.executable, *map(str, files)],
                          capture_output=True, text=True, cwd=cwd, timeout=600)


def test_mypy_strict_passes_on_the_examples_and_the_decorator(tmp_path):
    assert EXAMPLES, "no examples found"
    r = _mypy(TYPED, *EXAMPLES, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_pyright_passes_on_the_examples_and_the_decorator(tmp_path):
    r = _pyright(TYPED, *EXAMPLES, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_wrong_argument_to_a_decorated_function_is_a_type_error(tmp_path):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(WRONG)
    # The lease first or not: two overloads, so mypy names the variants (`month: str`).
    r = _mypy(wrong, cwd=tmp_path)
    assert r.returncode == 1 and "wrong.py:8: error" in r.stdout, r.stdout + r.stderr
    assert 'Argument "month"' in r.stdout or "month: str" in r.stdout, r.stdout
    r = _pyright(wrong, cwd=tmp_path)
    assert r.returncode == 1 and '"month"' in r.stdout, r.stdout + r.stderr
