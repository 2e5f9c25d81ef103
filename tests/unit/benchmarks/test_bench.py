"""The performance suite runs end to end on a tiny shape: its contenders agree, its ratios are numbers,
and the memory it reports for 3B + 500M is what the spec's shapes add up to (times are not checked)."""

from __future__ import annotations

import pytest


def test_a_random_model_directory_is_written_in_one_command_and_loads_like_a_checkpoint(tmp_path, capsys):
    from carbon_app.inference.generate import generate
    from carbon_app.model.bundle import load_bundle
    from tests.synthetic import main

    main([str(tmp_path / "tiny"), "--shape", "tiny", "--context", "256"])
    assert "wrote a random tiny Carbon-format model" in capsys.readouterr().out
    bundle = load_bundle(str(tmp_path / "tiny"))
    assert bundle.decoder.config.max_position_embeddings == 256
    assert len(generate(bundle, "ACGTAC", 30, temperature=0, seed=1).sequences[0]) == 30
    with pytest.raises(SystemExit):  # never over a folder that holds something
        main([str(tmp_path / "tiny"), "--shape", "tiny"])
    assert "exists and is not empty" in capsys.readouterr().err
