// The five asks of spec/speculation.md §6.2, fixed here so every engine and every run sees the same
// bytes. The edit input (a Python file) and the copy input (an English passage) are each about 900
// tokens, written for this benchmark.
#include "bench_asks.h"

namespace tandem::cli {
namespace {

const char* kEditFile = R"PY("""Inventory sync: reads stock levels from a CSV export and pushes changes to a warehouse API."""
import csv
import json
import logging
import time
import urllib.request

log = logging.getLogger("inventory_sync")


def load_settings(path):
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg.setdefault("batch_size", 50)
    cfg.setdefault("retries", 3)
    cfg.setdefault("backoff_seconds", 2.0)
    cfg.setdefault("dry_run", False)
    return cfg


def read_stock(cfg):
    rows = {}
    with open(cfg["csv_path"], newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            sku = row["sku"].strip()
            if not sku:
                continue
            try:
                rows[sku] = int(row["quantity"])
            except ValueError:
                log.warning("skipping %s: quantity %r is not a number", sku, row["quantity"])
    return rows


def fetch_remote(cfg, skus):
    url = cfg["api_url"] + "/stock?skus=" + ",".join(sorted(skus))
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + cfg["token"]})
    with urllib.request.urlopen(request, timeout=cfg.get("timeout", 30)) as response:
        payload = json.load(response)
    return {item["sku"]: item["quantity"] for item in payload["items"]}


def diff_stock(local, remote):
    changes = []
    for sku, quantity in local.items():
        if remote.get(sku) != quantity:
            changes.append({"sku": sku, "quantity": quantity, "previous": remote.get(sku)})
    return changes


def batches(items, size):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def push_batch(cfg, batch):
    body = json.dumps({"updates": batch}).encode("utf-8")
    request = urllib.request.Request(
        cfg["api_url"] + "/stock",
        data=body,
        method="PATCH",
        headers={"Authorization": "Bearer " + cfg["token"], "Content-Type": "application/json"},
    )
    for attempt in range(1, cfg["retries"] + 1):
        try:
            with urllib.request.urlopen(request, timeout=cfg.get("timeout", 30)) as response:
                return response.status
        except OSError as error:
            log.warning("batch of %d failed (attempt %d): %s", len(batch), attempt, error)
            time.sleep(cfg["backoff_seconds"] * attempt)
    raise RuntimeError("giving up after %d attempts" % cfg["retries"])


def summarize(changes):
    increases = sum(1 for c in changes if c["previous"] is not None and c["quantity"] > c["previous"])
    decreases = sum(1 for c in changes if c["previous"] is not None and c["quantity"] < c["previous"])
    new_items = sum(1 for c in changes if c["previous"] is None)
    return {"increases": increases, "decreases": decreases, "new": new_items, "total": len(changes)}


def run(cfg):
    local = read_stock(cfg)
    remote = fetch_remote(cfg, local.keys())
    changes = diff_stock(local, remote)
    log.info("%d of %d items changed", len(changes), len(local))
    if cfg["dry_run"]:
        for change in changes:
            log.info("would set %s to %d", change["sku"], change["quantity"])
        return summarize(changes)
    for batch in batches(changes, cfg["batch_size"]):
        status = push_batch(cfg, batch)
        log.info("pushed %d updates, status %s", len(batch), status)
    return summarize(changes)


if __name__ == "__main__":
    import sys

    logging.basicConfig(level=logging.INFO)
    cfg = load_settings(sys.argv[1] if len(sys.argv) > 1 else "settings.json")
    print(json.dumps(run(cfg), indent=2))
)PY";

const char* kCopyText =
    R"(The harbour town kept its clocks by the tide long before it kept them by the railway. Fishermen read the water
the way clerks read a ledger: the colour of the shallows, the sound the shingle made as it drew back, the height of
the weed on the harbour wall. When the first telegraph line reached the headland, the older families treated it as a
curiosity that would pass, much like the summer visitors who came for a week, admired the boats, and left before the
autumn gales.

The gales did not pass. Every winter the sea took something: a length of the promenade, a row of bathing huts, once
the end of the pier along with the little kiosk that had sold tea and postcards for forty years. The town rebuilt what
it could and learned to do without the rest. People kept spare nets in their lofts, candles in their kitchen drawers,
and a habit of looking at the sky before they looked at anything else in the morning.

The school stood on the hill above the church, and from its upper windows the children could see the whole bay. Their
teacher, a patient woman who had grown up inland and never quite lost her wonder at the sea, made them keep a weather
book. Each morning one child wrote down the wind, the cloud, the state of the water and the number of boats that had
gone out. At the end of each month the class compared the book with what the fishermen had caught, and by the end of
the year the children could predict a poor week almost as well as their fathers could.

In the spring a surveyor arrived to plan a new breakwater. He measured the bay for three weeks, staying at the inn by
the harbour and eating his supper in the corner by the fire. He was polite, careful, and certain that the sea could be
managed with enough stone. The fishermen listened to him without arguing. They had heard such certainty before, and they
knew that the sea did not argue either; it simply waited.

The breakwater took four summers to build. Barges brought granite from a quarry up the coast, and a crane on rails
lowered each block into place while a diver in a brass helmet guided it from below. The children watched from the school
windows and added the progress to their weather book, a line of small drawings that grew a little longer each month.
When the work was finished the town held a fair on the new wall, with a brass band, a tug-of-war between the fishermen
and the builders, and a great deal of cake.

For eleven years the breakwater held. The harbour grew calm enough for larger boats, and a cannery opened beside the old
fish market. Then came a winter storm that the old people compared to nothing they had seen. It blew for three days from
the south-east, the one direction the surveyor had judged unlikely, and on the third night the sea lifted two of the
great blocks as if they were driftwood and dropped them inside the harbour. Nobody was hurt, because everybody had read
the sky that morning and stayed ashore.

The town repaired the breakwater, as it had repaired everything else, and added a line to the weather book in the school
on the hill. The line did not blame the surveyor, who had done his best with the numbers he had. It said only that the
wind had come from the south-east for three days, that the boats had stayed in, and that the sea had been, as always,
the final judge of what people built beside it.)";

}  // namespace

const std::vector<Ask>& bench_asks() {
  static const std::vector<Ask> asks = {
      {"prose", "", "Write an essay of about 900 words on the history of lighthouses."},
      {"chat", "You are a helpful assistant.",
       "I'm choosing a used bicycle for a daily 10 km commute. What should I check, and in what order?"},
      {"code", "", "Write a Python module implementing an LRU cache with per-entry TTL, with docstrings and pytest tests."},
      {"edit", "",
       std::string(kEditFile) +
           "\nRename `cfg` to `config`, add type hints to every function, and return the whole file."},
      {"copy", "", std::string(kCopyText) + "\n\nRepeat the text above exactly, with no changes and no commentary."},
  };
  return asks;
}

}  // namespace tandem::cli
