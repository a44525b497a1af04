"""Write an InfraGraph of DGX H100s under a 2-tier Clos, built from the `infragraph` package's own
blueprints, for `trace-replay --network` (docs/howto/infragraph.md).

    python examples/infragraph_clos.py --uplink-gbit 100 -o clos.json   # 4:1 oversubscribed

16 DGX H100 (8 GPUs and a 400 Gbit/s NIC per GPU each) under 16-port switches; `--uplink-gbit`
is the rate of the links from the first tier of switches up (400: not oversubscribed). The
switches' internal link ("ic") has no rate in the blueprint: it is annotated non-blocking, far
above the ports'.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uplink-gbit", type=float, default=100.0, help="tier-0 to tier-1 link rate (Gbit/s)")
    ap.add_argument("--nic-gbit", type=float, default=400.0, help="each GPU's NIC to its tier-0 switch (Gbit/s)")
    ap.add_argument("-o", "--out", type=Path, default=Path("clos.json"))
    args = ap.parse_args()

    import infragraph
    from infragraph.blueprints.devices.generic.generic_switch import Switch
    from infragraph.blueprints.devices.nvidia.dgx import NvidiaDGX
    from infragraph.blueprints.fabrics.clos_fat_tree_fabric import ClosFatTreeFabric

    infra = ClosFatTreeFabric(Switch(port_count=16), NvidiaDGX("dgx_h100"), 2, [args.nic_gbit, args.uplink_gbit])
    ann = infragraph.Annotation()
    ann.links.add(name="ic").attributes.add(attribute="bandwidth", value="12800 Gbps")
    args.out.write_text(json.dumps({"infrastructure": infra.serialize("dict"), "annotations": ann.serialize("dict")}))
    print(f"wrote {args.out}: 16 DGX H100, {args.nic_gbit:g} Gbit/s NICs, {args.uplink_gbit:g} Gbit/s uplinks")


if __name__ == "__main__":
    main()
