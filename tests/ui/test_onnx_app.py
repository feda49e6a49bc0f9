"""The explorer opens each bundled ONNX model, compiles it on every device found and verifies the plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import load_onnx
from engine.devices import discover
from engine.pipeline import Options
from sample_graphs import onnx_models
from tests.ui.conftest import compiled
from zyx_explorer.app import ExplorerApp

MODELS = Path(onnx_models.__file__).parent


@pytest.mark.parametrize("name", onnx_models.MODELS)
async def test_each_onnx_model_opens_and_its_plan_verifies(name, tmp_path):
    path = MODELS / f"{name}.onnx"
    app = ExplorerApp(load_onnx(path, weights_dir=tmp_path), path, screenshot_dir=tmp_path, devices=discover(),
                      options=Options(tune=False, tune_cache=False))
    async with app.run_test(size=(140, 40)) as pilot:
        await compiled(pilot, limit=1500)
        assert app.session.failed is None
        assert app.session.compilation.verification.ok
        assert app.session.compilation.program.outputs == {"mlp": ("log_probs",), "cnn": ("probs",),
                                                           "gpt": ("logits",)}[name]
