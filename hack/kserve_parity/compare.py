"""Compare two records of clients_check.py: KServe's (first) and ours (second).

Every answer, status, gRPC code and exception type must be the same. An error message may say more than
KServe's (ours adds Triton's sentence and the models there are), so KServe's message must be found in ours.
Prints each difference with where it is; exits 1 when there is one.

    python compare.py kserve-0.21.0.json ours.json
"""
import json
import sys
from typing import Any, List

#: the fields holding a server's error message
MESSAGES = ("error", "details")


def differences(kserve: Any, ours: Any, where: str = "") -> List[str]:
    """Where ``ours`` differs from ``kserve``, one line each."""
    if isinstance(kserve, dict) and isinstance(ours, dict):
        found = [f"{where}/{key}: KServe has it, ours has not" for key in kserve if key not in ours]
        found += [f"{where}/{key}: ours has it, KServe has not" for key in ours if key not in kserve]
        for key in kserve.keys() & ours.keys():
            if key in MESSAGES and isinstance(kserve[key], str) and isinstance(ours[key], str):
                if kserve[key] not in ours[key]:
                    found.append(f"{where}/{key}: KServe's message {kserve[key]!r} is not in ours {ours[key]!r}")
            else:
                found += differences(kserve[key], ours[key], f"{where}/{key}")
        return sorted(found)
    if isinstance(kserve, list) and isinstance(ours, list) and len(kserve) == len(ours):
        pairs = enumerate(zip(kserve, ours, strict=True))
        return [line for i, (k, o) in pairs for line in differences(k, o, f"{where}/{i}")]
    if kserve != ours:
        return [f"{where}: KServe {json.dumps(kserve)}, ours {json.dumps(ours)}"]
    return []


def main(argv: List[str]) -> int:
    kserve_file, ours_file = argv
    with open(kserve_file) as k, open(ours_file) as o:
        found = differences(json.load(k), json.load(o))
    for line in found:
        print(line)
    print(f"{len(found)} differences" if found else "the same (KServe's messages found in ours)", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
