"""``process_traffic``: what the HTTP clients of this process did, per host, bounded in size."""

from __future__ import annotations

import gc

from scrapeflow.http import HostTraffic, Stats, process_traffic


def test_clients_gone_over_many_hosts_keep_a_bounded_table_and_every_count() -> None:
    before = process_traffic()
    # A bulk fetch over 3,000 sites, one client per batch of 10; one site is busy.
    for batch in range(300):
        stats = Stats()
        for site in range(10):
            stats.host(f"site-{batch * 10 + site}.test:443").requests += 1
        if batch == 0:
            stats.host("busy.test:443").requests += 5000
        del stats
    gc.collect()

    after = process_traffic()
    assert len(after) < 1000  # not one entry per site
    busy = after["busy.test:443"].requests - before.get("busy.test:443", HostTraffic()).requests
    assert busy == 5000  # the busiest host keeps its name
    assert "other" in after
    added = sum(t.requests for t in after.values()) - sum(t.requests for t in before.values())
    assert added == 3000 + 5000  # folded, never dropped
