"""Write weight-stripped ONNX models of VGG16 and ResNet-50 (a few KB each: every weight is a
`<name>__SHAPE` tensor, as in onnx's `light_*` test models), to try the ONNX front end without
downloading a model zoo:

    python examples/workloads/make_onnx_models.py out/models
    trace-convert onnx out/models/resnet50.onnx
    trace-convert onnx out/models/resnet50.onnx --emit text --policy DATA -o out/Resnet50_DataParallel.txt
    trace-convert onnx out/models/vgg16.onnx --emit et --strategy hybrid --npus 8 --tp 2 --pp 2 \\
        --microbatches 4 --device A100 -o out/vgg16_hybrid

The builders are the ones the tests use (tests/frontends/onnx_builders.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "frontends"))

import onnx  # noqa: E402
import onnx_builders  # noqa: E402


def main(out: str = "out/models") -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for name, model in (("vgg16", onnx_builders.vgg(16)), ("vgg19", onnx_builders.vgg(19)),
                        ("resnet50", onnx_builders.resnet50())):
        onnx.save_model(model, str(folder / f"{name}.onnx"))
        print(folder / f"{name}.onnx")


if __name__ == "__main__":
    main(*sys.argv[1:2])
