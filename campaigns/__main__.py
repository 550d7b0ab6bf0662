"""``python -m campaigns [CAMPAIGN ...] [--short] [--out DIR]``: run fault campaigns.

Campaigns: storms, crash, matrix, schemathesis, soak, webhooks, deferred, failover, providers,
notifications, secrets
(``all``: every one, in that order, on one stack; secrets runs after the others so it greps
everything they logged). Exit status 0 when no campaign found a violation, 1 otherwise, 2 when
the stack could not run.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from campaigns.harness import CampaignError, StackOptions
from campaigns.runner import CAMPAIGNS, PROFILES, run_campaigns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m campaigns",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "campaigns", nargs="*", default=["all"], help=f"all, or some of: {', '.join(CAMPAIGNS)}"
    )
    parser.add_argument("--short", action="store_true", help="the short (CI) version")
    parser.add_argument("--out", type=Path, help="output directory (logs, CSVs, dump, reports)")
    parser.add_argument(
        "--database-url",
        help="campaign database (recreated; name must end "
        "in 'campaigns'); default CAMPAIGN_DATABASE_URL or <DATABASE_URL>_campaigns",
    )
    parser.add_argument("--soak-seconds", type=float, help="override the soak's duration")
    parser.add_argument("--soak-rate", type=float, help="override the soak's requests/s")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)

    names = list(CAMPAIGNS) if "all" in args.campaigns else args.campaigns
    unknown = [n for n in names if n not in CAMPAIGNS]
    if unknown:
        parser.error(f"unknown campaign(s): {', '.join(unknown)}")
    profile = dict(PROFILES["short" if args.short else "full"])
    if args.soak_seconds:
        profile["soak"] = {**profile["soak"], "seconds": args.soak_seconds}
    if args.soak_rate:
        profile["soak"] = {**profile["soak"], "rate": args.soak_rate}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or Path(tempfile.mkdtemp(prefix=f"campaigns-{stamp}-"))
    options = StackOptions(out_dir=out)
    if args.database_url:
        options.database_url = args.database_url
    print(
        f"campaigns: {', '.join(names)} ({'short' if args.short else 'full'}); output in {out}",
        flush=True,
    )
    # SIGTERM stops the stack's processes too (they run in sessions of their own).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        results = run_campaigns(names, profile, options, echo=True)
    except CampaignError as exc:
        print(f"campaigns could not run: {exc}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps([r.as_json() for r in results], indent=1, default=str))
    failed = [r.name for r in results if not r.ok]
    print()
    print(
        f"{len(results) - len(failed)} of {len(results)} campaigns without violation"
        + (f"; violations in: {', '.join(failed)}" if failed else "")
    )
    print(f"output: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
