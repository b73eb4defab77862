"""Float32 linear layers through oneDNN (`lewisrag.data.cpu_linear`): the same numbers as torch's
BLAS to float rounding, forward and backward, torch's own function for what oneDNN does not take,
and torch's own back after the block."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from lewisrag.data import cpu_linear as cl
from lewisrag.data.io import InputError

usable = pytest.mark.skipif(
    not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")),
    reason="this torch has no oneDNN linear")


@usable
@pytest.mark.parametrize("shape", [(7, 16), (3, 5, 16), (2, 3, 4, 16)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_forward_and_backward_match_torch(shape, with_bias, monkeypatch):
    monkeypatch.setattr(cl, "MIN_MACS", 0)  # these small products too
    calls = []
    product = cl._product
    monkeypatch.setattr(cl, "_product", lambda *a: calls.append(a[0].shape) or product(*a))
    torch.manual_seed(0)
    x = torch.randn(*shape, requires_grad=True)
    w = torch.randn(24, 16, requires_grad=True)
    b = torch.randn(24, requires_grad=True) if with_bias else None
    g = torch.randn(*shape[:-1], 24)
    grads = {}
    for kind in cl.KINDS:
        with cl.cpu_linear(kind):
            y = F.linear(x, w, b)
            (y * g).sum().backward()
        grads[kind] = [y.detach(), x.grad, w.grad] + ([b.grad] if with_bias else [])
        x.grad = w.grad = None
        if with_bias:
            b.grad = None
    rows = x[..., 0].numel()
    assert calls == [(rows, 16), (rows, 24), (24, rows)]  # oneDNN's: the forward, then g @ W and g.T @ x
    assert grads["blas"][0].shape == (*shape[:-1], 24)
    for ours, theirs in zip(grads["onednn"], grads["blas"]):
        assert ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


@usable
def test_a_frozen_weight_gets_no_gradient_and_the_input_one_does(monkeypatch):
    monkeypatch.setattr(cl, "MIN_MACS", 0)  # small products through oneDNN too
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(3, 8)  # a frozen layer under a trained one
    with cl.cpu_linear("onednn"):
        F.linear(x, w).sum().backward()
    assert w.grad is None
    torch.testing.assert_close(x.grad, w.sum(0).expand(4, 8))


@usable
def test_strided_inputs_and_weights_read_as_they_are(monkeypatch):
    """A transposed weight (tied or shared tables) and a non-contiguous input give torch's numbers."""
    monkeypatch.setattr(cl, "MIN_MACS", 0)  # small products through oneDNN too
    torch.manual_seed(0)
    x, w = torch.randn(16, 6).t(), torch.randn(16, 10).t()  # (6, 16) and (10, 16), both views
    with cl.cpu_linear("onednn"):
        y = F.linear(x, w)
    torch.testing.assert_close(y, x @ w.t(), rtol=1e-5, atol=1e-5)


@usable
def test_what_onednn_does_not_take_goes_to_torch(monkeypatch):
    """bf16 autocast keeps its bf16 product, other dtypes and 1-d inputs stay torch's, empty batches work."""
    monkeypatch.setattr(cl, "MIN_MACS", 0)  # small products through oneDNN too
    w = torch.randn(3, 8)
    with cl.cpu_linear("onednn"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert F.linear(torch.randn(4, 8), w).dtype == torch.bfloat16
        assert F.linear(torch.randn(4, 8, dtype=torch.float64), w.double()).dtype == torch.float64
        v = torch.randn(8)
        torch.testing.assert_close(F.linear(v, w), w @ v)  # a vector input
        assert F.linear(torch.randn(0, 8), w).shape == (0, 3)


@usable
def test_a_model_trains_to_the_same_numbers_either_way(monkeypatch):
    """Three AdamW steps of a small BART (every nn.Linear through the switch): the same losses."""
    monkeypatch.setattr(cl, "MIN_MACS", 0)  # small products through oneDNN too
    from transformers import BartConfig, BartForConditionalGeneration

    losses = {}
    for kind in cl.KINDS:
        torch.manual_seed(0)
        model = BartForConditionalGeneration(BartConfig(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1,
                                                        encoder_attention_heads=2, decoder_attention_heads=2,
                                                        encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        ids, labels = torch.randint(4, 64, (3, 10)), torch.randint(4, 64, (3, 5))
        losses[kind] = []
        with cl.cpu_linear(kind):
            for _ in range(3):
                loss = model(input_ids=ids, labels=labels).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses[kind].append(loss.item())
    assert losses["onednn"] == pytest.approx(losses["blas"], rel=1e-4)
    assert losses["blas"][-1] < losses["blas"][0]


def test_the_block_restores_what_was_before():
    torch_linear = F.linear
    with cl.cpu_linear("onednn") as kind:
        assert kind == "onednn" and cl.current_kind() == "onednn"
        with cl.cpu_linear("blas"):
            assert F.linear is torch_linear and cl.current_kind() == "blas"
        assert cl.current_kind() == "onednn"
    assert F.linear is torch_linear
    with pytest.raises(RuntimeError), cl.cpu_linear("onednn"):
        raise RuntimeError("a stage failed")
    assert F.linear is torch_linear and cl.current_kind() == "blas"


def test_auto_takes_onednn_only_where_mkl_runs_at_half_speed():
    """Intel's CPUs keep MKL (its AVX-512 kernels run there); AMD's Zen 5 and later (AVX-512 at full
    width) take oneDNN; Zen 4 (AVX-512 in two 256-bit halves: MKL's AVX2 code is at its peak), CPUs
    without AVX-512, other makers and CPUs whose maker or family is not read keep BLAS."""
    assert cl.auto_kind("GenuineIntel", {"avx2", "avx512f"}, 6) == "blas"
    assert cl.auto_kind("AuthenticAMD", {"avx2"}, 26) == "blas"
    assert cl.auto_kind("AuthenticAMD", {"avx2", "avx512f"}, 25) == "blas"  # Zen 4
    assert cl.auto_kind("AuthenticAMD", {"avx2", "avx512f"}, None) == "blas"
    assert cl.auto_kind("", {"avx512f"}, 26) == "blas"
    assert cl.auto_kind("HygonGenuine", {"avx512f"}, 26) == "blas"
    can = (torch.backends.mkl.is_available() and torch.backends.mkldnn.is_available()
           and cl.platform.machine() in ("x86_64", "AMD64"))
    assert cl.auto_kind("AuthenticAMD", {"avx2", "avx512f"}, 26) == ("onednn" if can else "blas")
    assert cl.auto_kind("AuthenticAMD", {"avx2", "avx512f"}, 27) == ("onednn" if can else "blas")


def test_the_cpu_family_is_read_as_a_number(monkeypatch):
    monkeypatch.setattr(cl, "cpuinfo", lambda field: {"cpu family": "25"}.get(field, ""))
    assert cl.cpu_family() == 25
    monkeypatch.setattr(cl, "cpuinfo", lambda field: "")
    assert cl.cpu_family() is None


def test_the_choice_is_checked_and_read_from_the_environment(monkeypatch):
    monkeypatch.setenv(cl.ENV, "onednn")
    assert cl.resolve_kind(None) == "onednn"
    monkeypatch.setenv(cl.ENV, "quick")
    with pytest.raises(InputError, match=r"\$LEWISRAG_CPU_LINEAR: must be auto, blas or onednn, got 'quick'"):
        cl.resolve_kind(None)
    monkeypatch.delenv(cl.ENV)
    assert cl.resolve_kind(None) == cl.auto_kind()
    with pytest.raises(InputError, match="--cpu-linear: must be auto, blas or onednn"):
        cl.cpu_linear("mkl").__enter__()
    assert cl.current_kind() == "blas"


def test_model_commands_read_the_choice_from_the_environment(monkeypatch, capsys, tmp_path):
    """A command that runs models refuses a bad $LEWISRAG_CPU_LINEAR in one line; one that runs none never reads it."""
    from conftest import run_main

    monkeypatch.setenv(cl.ENV, "fastest")
    code, _, err = run_main(monkeypatch, capsys, "index", "search", "--index", tmp_path / "none", "--query", "who")
    assert code == 2 and err.strip() == "error: $LEWISRAG_CPU_LINEAR: must be auto, blas or onednn, got 'fastest'"
    code, out, _ = run_main(monkeypatch, capsys, "world", "--out", tmp_path / "world", "--entities", "40")
    assert code == 0 and (tmp_path / "world").is_dir()
    assert cl.current_kind() == "blas"


def test_a_model_command_enters_the_block_only_where_it_may_not_keep_torchs_linear(monkeypatch):
    """Told without torch (`cpu_linear_choice.keeps_torch_linear`, which `commands._ui.Command` asks before
    torch loads): blas, and auto on a CPU that auto keeps on BLAS, need no block; auto on a Zen 5 with
    AVX-512 (torch's build decides there), onednn and a name to refuse enter it."""
    from lewisrag.data import cpu_linear_choice as choice

    cpu = {"vendor_id": "AuthenticAMD", "cpu family": "25", "flags": "avx2 avx512f"}  # a Zen 4
    monkeypatch.setattr(choice, "cpuinfo", lambda field: cpu.get(field, ""))
    for kind, keeps in (("blas", True), ("auto", True), ("onednn", False), ("fastest", False)):
        monkeypatch.setenv(cl.ENV, kind)
        assert choice.keeps_torch_linear() is keeps, kind
    monkeypatch.delenv(cl.ENV)
    assert choice.keeps_torch_linear() and cl.auto_kind(cpu["vendor_id"], set(cpu["flags"].split()), 25) == "blas"
    cpu["cpu family"] = "26"
    assert not choice.keeps_torch_linear()
    monkeypatch.setenv(cl.ENV, "blas")
    assert choice.keeps_torch_linear()


@usable
@pytest.mark.skipif(not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")),
                    reason="torch.compile needs a C compiler on PATH")
def test_torch_compile_traces_torch_own_linear_inside_the_block(monkeypatch):
    """`train rag --compile` inside a oneDNN block: the compiled graph holds torch's linear (tracing
    takes the fallback), and it trains to eager's numbers."""
    monkeypatch.setattr(cl, "MIN_MACS", 0)  # small products through oneDNN too
    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    eager = layer(x).sum()
    eager.backward()
    expected = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    with cl.cpu_linear("onednn"):
        compiled = torch.compile(layer)(x).sum()
        compiled.backward()
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    for p, g in zip(layer.parameters(), expected):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-5)


@usable
def test_small_products_stay_on_blas(monkeypatch):
    """Under MIN_MACS multiply-adds oneDNN's per-shape kernel costs more than it saves: torch's own runs."""
    calls = []
    product = cl._product
    monkeypatch.setattr(cl, "_product", lambda *a: calls.append(a[0].shape) or product(*a))
    small, w = torch.randn(64, 128), torch.randn(128, 128)  # 2^20 multiply-adds
    big = torch.randn(256, 128)  # 2^22
    with cl.cpu_linear("onednn"):
        torch.testing.assert_close(F.linear(small, w), small @ w.t())
        assert calls == []
        torch.testing.assert_close(F.linear(big, w), big @ w.t(), rtol=1e-5, atol=1e-4)
    assert calls == [(256, 128)]
