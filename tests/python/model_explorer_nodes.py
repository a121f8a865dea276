#!/usr/bin/env python3
"""The graphs Model Explorer shows for an ETRecord, through ExecuTorch's own
adapter (etrecord-adapter-model-explorer), as JSON: {graph id: [node id, ...]}.
With an overlay file as the second argument, also builds it into Model
Explorer's GraphNodeData and NodeDataResult classes and writes it back:
how many results it holds, and whether every field given comes back unchanged.

    model_explorer_nodes.py ETRECORD [OVERLAY.json]

Run with a Python that has torch, executorch and the adapter
(conftest.executorch_python); exits 3 when the adapter is not importable.
"""
import json
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")


def main():
    try:
        from etrecord_adapter_model_explorer.builder.builder import ETRecordGraphBuilder
        from model_explorer.node_data_builder import GraphNodeData, NodeDataResult
    except ImportError as e:
        print(f"no Model Explorer adapter: {e}", file=sys.stderr)
        return 3
    graphs = {}
    for collection in ETRecordGraphBuilder(Path(sys.argv[1]), {}).build():
        for graph in collection.graphs:
            graphs[graph.id] = [node.id for node in graph.nodes]
    out = {"graphs": graphs}
    if len(sys.argv) > 2:
        with open(sys.argv[2]) as f:
            data = json.load(f)
        # Model Explorer's own classes for one graph's node data, and back.
        fields = {k: v for k, v in data.items() if k != "results"}
        loaded = GraphNodeData(
            results={k: NodeDataResult(**v) for k, v in data["results"].items()}, **fields)
        out["loaded_results"] = len(loaded.results)
        back = json.loads(loaded.to_json_string())
        # Written back with Model Explorer's defaults for the fields not given.
        out["round_trip_equal"] = all(back[k] == v for k, v in data.items())
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
