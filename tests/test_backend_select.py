"""Device and collective-backend selection (trainer/dist.py), with which modules import under
the test's control: torch's native xccl, oneCCL's bindings, IPEX. No XPU exists here; torch is the
real CPU build, with torch.xpu.is_available / is_xccl_available patched per case."""
import os
import types

import pytest
import torch
import torch.distributed as tdist

from restartlab.contracts import layout
from restartlab.trainer import dist as rdist
from tests.helpers import run_trainer


class Modules:
    """find_spec / import_module stand-ins: `present` names import (and are recorded)."""

    def __init__(self, *present):
        self.present, self.imported = set(present), []

    def find_spec(self, name):
        return object() if name in self.present else None

    def import_module(self, name):
        if name not in self.present:
            raise ModuleNotFoundError(f"No module named '{name}'")
        self.imported.append(name)
        return types.ModuleType(name)

    def pick(self, device):
        return rdist.pick_device(device, find_spec=self.find_spec, import_module=self.import_module)


@pytest.fixture
def xpu(monkeypatch):
    """An XPU that torch sees; `xccl(bool)` says whether this torch has the native backend."""
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)

    def xccl(available):
        monkeypatch.setattr(tdist, "is_xccl_available", lambda: available)
    return xccl


def test_native_xccl_first_and_ipex_only_when_installed(xpu):
    xpu(True)
    both = Modules("intel_extension_for_pytorch", "oneccl_bindings_for_pytorch")
    assert both.pick("xpu") == ("xpu", "xccl")
    assert both.imported == ["intel_extension_for_pytorch"]  # oneCCL's bindings not needed
    bare = Modules()
    assert bare.pick("xpu") == ("xpu", "xccl") and bare.imported == []


def test_oneccl_bindings_when_torch_has_no_xccl(xpu, monkeypatch):
    xpu(False)
    m = Modules("oneccl_bindings_for_pytorch")
    assert m.pick("xpu") == ("xpu", "ccl") and m.imported == ["oneccl_bindings_for_pytorch"]
    monkeypatch.delattr(tdist, "is_xccl_available")  # an older torch without the function at all
    assert Modules("oneccl_bindings_for_pytorch").pick("xpu") == ("xpu", "ccl")


def test_neither_backend_is_one_clear_error_naming_both(xpu):
    xpu(False)
    with pytest.raises(rdist.BackendError) as e:
        Modules("intel_extension_for_pytorch").pick("xpu")
    msg = str(e.value)
    assert "xccl" in msg and "oneccl_bindings_for_pytorch" in msg and "module load frameworks" in msg


def test_auto_finds_an_xpu_and_never_imports_intel_modules_elsewhere(xpu, monkeypatch):
    xpu(True)
    assert Modules().pick("auto") == ("xpu", "xccl")
    monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    m = Modules("intel_extension_for_pytorch", "oneccl_bindings_for_pytorch")
    assert m.pick("cpu") == ("cpu", "gloo") and m.imported == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert m.pick("cuda") == ("cuda", "nccl") and m.imported == []
    # auto with IPEX installed but no XPU behind it: IPEX is tried (older torch needs it to see
    # an XPU), then cuda
    assert m.pick("auto") == ("cuda", "nccl") and m.imported == ["intel_extension_for_pytorch"]


def test_ipex_makes_the_xpu_visible_on_an_older_torch(monkeypatch):
    seen = {"xpu": False}
    monkeypatch.setattr(torch.xpu, "is_available", lambda: seen["xpu"])
    monkeypatch.setattr(tdist, "is_xccl_available", lambda: False)

    class WithIpex(Modules):
        def import_module(self, name):
            mod = super().import_module(name)
            if name == "intel_extension_for_pytorch":
                seen["xpu"] = True  # what importing IPEX does for torch < 2.4
            return mod
    m = WithIpex("intel_extension_for_pytorch", "oneccl_bindings_for_pytorch")
    assert m.pick("auto") == ("xpu", "ccl")


def test_missing_devices_are_one_line_errors(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    with pytest.raises(rdist.BackendError, match="--device cuda: torch.cuda.is_available"):
        Modules().pick("cuda")
    with pytest.raises(rdist.BackendError, match="--device xpu: torch.xpu.is_available"):
        Modules().pick("xpu")


@pytest.mark.skipif(torch.xpu.is_available(), reason="this machine has an XPU")
def test_trainer_on_xpu_without_one_exits_2_with_one_line(tmp_path):
    r = run_trainer(2, ["--model", "tiny", "--train-iters", "2", "--device", "xpu", "--outdir", str(tmp_path)])
    assert r.returncode == 2 and "--device xpu: torch.xpu.is_available() is false" in r.stdout, r.stdout
    assert "Traceback" not in r.stdout and not os.path.exists(tmp_path / layout.metrics_name(0))
