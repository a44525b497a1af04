"""Small ONNX models built with onnx.helper, so the ModTrans tests need neither torch nor downloads.

Weights can be given three ways, as real models ship them:
  inline    numpy initializers (small models only);
  external  initializers whose data lives in an external file that is never written (what a model
            with external data looks like when the data file is absent);
  stripped  onnx's `light_*` convention: a `<name>__SHAPE` int64 tensor fed to ConstantOfShape.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Net:
    def __init__(self, weights: str = "stripped", batch: int = 1):
        self.weights = weights
        self.nodes: list = []
        self.inits: list = []
        self.n = 0
        self.batch = batch

    def tensor(self, name: str, shape: tuple[int, ...]) -> str:
        if self.weights == "inline":
            self.inits.append(numpy_helper.from_array(np.zeros(shape, np.float32), name))
        elif self.weights == "external":
            t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(shape))
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", "absent.weights"), ("offset", "0"),
                         ("length", str(4 * int(np.prod(shape))))):
                e = t.external_data.add()
                e.key, e.value = k, v
            self.inits.append(t)
        else:
            self.inits.append(numpy_helper.from_array(np.array(shape, np.int64), name + "__SHAPE"))
            value = helper.make_tensor("value", TensorProto.FLOAT, [1], [0.0])
            self.nodes.append(helper.make_node("ConstantOfShape", [name + "__SHAPE"], [name], value=value))
        return name

    def out(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n}"

    def conv(self, name, x, cin, cout, k, stride=1, pad=None, bias=True):
        pad = k // 2 if pad is None else pad
        ins = [x, self.tensor(f"{name}_w", (cout, cin, k, k))]
        if bias:
            ins.append(self.tensor(f"{name}_b", (cout,)))
        y = self.out(name)
        self.nodes.append(helper.make_node("Conv", ins, [y], name=name, kernel_shape=[k, k],
                                           strides=[stride, stride], pads=[pad] * 4))
        return y

    def bn(self, name, x, c):
        ins = [x] + [self.tensor(f"{name}_{p}", (c,)) for p in ("scale", "bias", "mean", "var")]
        y = self.out(name)
        self.nodes.append(helper.make_node("BatchNormalization", ins, [y], name=name))
        return y

    def op(self, op, ins, **attrs):
        y = self.out(op.lower())
        self.nodes.append(helper.make_node(op, ins, [y], **attrs))
        return y

    def fc(self, name, x, cin, cout):
        y = self.out(name)
        self.nodes.append(helper.make_node(
            "Gemm", [x, self.tensor(f"{name}_w", (cout, cin)), self.tensor(f"{name}_b", (cout,))],
            [y], name=name, transB=1))
        return y

    def model(self, x_shape, y, name="net") -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


VGG = {16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
       19: [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
            512, 512, 512, 512, "M"]}


def vgg(depth: int = 16, weights: str = "stripped") -> onnx.ModelProto:
    net, x, cin, i = Net(weights), "x", 3, 0
    for v in VGG[depth]:
        if v == "M":
            x = net.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        else:
            x = net.op("Relu", [net.conv(f"conv{i}", x, cin, v, 3)])
            cin, i = v, i + 1
    x = net.op("Flatten", [x])
    for j, (a, b) in enumerate([(25088, 4096), (4096, 4096), (4096, 1000)]):
        x = net.fc(f"fc{j}", x, a, b)
        x = net.op("Relu", [x]) if j < 2 else x
    return net.model((1, 3, 224, 224), x, f"vgg{depth}")


def resnet50(weights: str = "stripped") -> onnx.ModelProto:
    """torchvision's ResNet-50 (v1.5: stride in the 3x3 conv), convolutions without bias."""
    net = Net(weights)
    x = net.op("Relu", [net.bn("bn0", net.conv("conv0", "x", 3, 64, 7, 2, 3, bias=False), 64)])
    x = net.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (blocks, width) in enumerate(zip([3, 4, 6, 3], [64, 128, 256, 512]), start=1):
        for blk in range(blocks):
            stride = 2 if blk == 0 and stage > 1 else 1
            p = f"s{stage}b{blk}"
            y = net.op("Relu", [net.bn(p + "bn1", net.conv(p + "c1", x, cin, width, 1, bias=False), width)])
            y = net.op("Relu", [net.bn(p + "bn2", net.conv(p + "c2", y, width, width, 3, stride, bias=False), width)])
            y = net.bn(p + "bn3", net.conv(p + "c3", y, width, 4 * width, 1, bias=False), 4 * width)
            short = x
            if blk == 0:
                short = net.bn(p + "bnd", net.conv(p + "down", x, cin, 4 * width, 1, stride, bias=False), 4 * width)
            x = net.op("Relu", [net.op("Add", [y, short])])
            cin = 4 * width
    x = net.op("Flatten", [net.op("GlobalAveragePool", [x])])
    return net.model((1, 3, 224, 224), net.fc("fc", x, 2048, 1000), "resnet50")


def mlp(weights: str = "inline", sizes=(64, 128, 32)) -> onnx.ModelProto:
    net, x = Net(weights), "x"
    for j, (a, b) in enumerate(zip(sizes, sizes[1:])):
        x = net.fc(f"fc{j}", x, a, b)
        x = net.op("Relu", [x])
    return net.model((4, sizes[0]), x, "mlp")
