#!/usr/bin/env python3
"""Runs a benchmark with --json FILE and checks the file: valid JSON, the
expected top-level keys, each a non-empty list of records."""
import argparse
import json
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", required=True, help="where the benchmark writes its JSON")
    parser.add_argument("--keys", default="", help="comma-separated keys that must hold non-empty lists")
    parser.add_argument("--record-keys", default="",
                        help="comma-separated keys every record of a top-level list must have")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- benchmark command")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    result = subprocess.run(command + ["--json", args.json], check=False)
    if result.returncode != 0:
        print(f"benchmark exited with {result.returncode}", file=sys.stderr)
        return 1
    with open(args.json, encoding="utf-8") as f:
        data = json.load(f)
    for key in filter(None, args.keys.split(",")):
        records = data.get(key) if isinstance(data, dict) else None
        if not isinstance(records, list) or not records:
            print(f"JSON key '{key}' is missing or empty", file=sys.stderr)
            return 1
    if isinstance(data, list):
        if not data:
            print("JSON list is empty", file=sys.stderr)
            return 1
        wanted = set(filter(None, args.record_keys.split(",")))
        for record in data:
            missing = wanted - set(record)
            if missing:
                print(f"record {record} lacks {sorted(missing)}", file=sys.stderr)
                return 1
    print(f"{args.json}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
