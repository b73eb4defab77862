"""Every file of an output lewisrag writes gets the mode the umask gives a new file: transformers 5's
`save_pretrained` writes model.safetensors 0600 beside a 0644 config.json, so a run's weights were
unreadable to the group and others that could read everything else (`find RUN -perm 600`)."""

from __future__ import annotations

import os
import stat

from lewisrag.data.io import _umask
from lewisrag.data.outputs import rewritten_dir, staged_dir


def _modes(folder):
    return {p.relative_to(folder).as_posix(): stat.S_IMODE(p.lstat().st_mode) for p in folder.rglob("*")}


def test_weights_saved_into_a_staged_folder_get_the_usual_mode(tmp_path):
    from transformers import BartConfig, BartForConditionalGeneration

    config = BartConfig(vocab_size=32, d_model=8, encoder_layers=1, decoder_layers=1, encoder_attention_heads=1,
                        decoder_attention_heads=1, encoder_ffn_dim=8, decoder_ffn_dim=8, max_position_embeddings=16)
    out = tmp_path / "generator"
    with staged_dir(out, "generator") as tmp:  # where every save_pretrained of lewisrag writes
        BartForConditionalGeneration(config).save_pretrained(tmp / "final")
        (tmp / "private.bin").write_bytes(b"x")
        os.chmod(tmp / "private.bin", 0o600)
    modes = _modes(out)
    assert "final/model.safetensors" in modes
    usual = {p: (0o777 if (out / p).is_dir() else 0o666) & ~_umask() for p in modes}
    assert modes == usual


def test_a_users_file_kept_in_a_rewritten_output_keeps_its_mode(tmp_path):
    out = tmp_path / "out"
    with rewritten_dir(out, "world") as tmp:
        (tmp / "a.txt").write_text("a")
    (out / "mine.txt").write_text("the user's")
    os.chmod(out / "mine.txt", 0o600)
    with rewritten_dir(out, "world") as tmp:
        (tmp / "a.txt").write_text("b")
        os.chmod(tmp / "a.txt", 0o600)
    assert stat.S_IMODE((out / "mine.txt").stat().st_mode) == 0o600  # a hard link of the user's file: theirs
    assert stat.S_IMODE((out / "a.txt").stat().st_mode) == 0o666 & ~_umask()
