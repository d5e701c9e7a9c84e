"""The nodes page (issue 38): each node's cpus, memory, labels and running against capacity,
and the background counters with words; an external registry's markup escaped."""

from __future__ import annotations

import re

import pytest
import redis

from scheduler.api import ui_nodes
from scheduler.models.registry import Node
from scheduler.store.keys import Keys
from tests.conftest import ClientFactory, SettingsFactory, report, submit


def node_rows(page: str) -> dict[str, dict[str, str]]:
    """{node id: {heading: the cell's text}} of the nodes table."""
    table = page.split('<table class="cards" id="nodes">', 1)[1].split("</table>", 1)[0]
    rows = {}
    for row_id, row in re.findall(r'<tr id="node-([^"]+)">(.*?)</tr>', table):
        cells = re.findall(r'<td[^>]* data-label="([^"]+)">(.*?)</td>', row)
        rows[row_id] = {
            label: re.sub(r"<title>.*?</title>|<[^>]+>", "", html) for label, html in cells
        }
    return rows


def test_each_node_shows_what_it_offers_and_runs(make_client: ClientFactory) -> None:
    api = make_client(max_jobs_per_node=3)
    body = {"id": "n1", "hostname": "n1", "cpu_count": 8, "memory_mb": 16384,
            "labels": {"zone": "eu-1a", "gpu": "a100"}}  # fmt: skip
    assert api.post("/nodes/register", json=body).status_code == 201
    bare = {"id": "n2", "hostname": "n2", "cpu_count": 2, "memory_mb": 512}
    assert api.post("/nodes/register", json=bare).status_code == 201
    job = submit(api, command="sleep 1", node_selector={"node.id": "n1"})
    assert report(api, job["job_id"], "running").status_code == 200
    rows = node_rows(api.get("/ui/nodes").text)
    n1, n2 = rows["n1"], rows["n2"]
    assert (n1["cpus"], n1["memory"], n1["labels"]) == ("8", "16.0 GiB", "gpu=a100 zone=eu-1a")
    assert n1["running / capacity"].strip() == "1 / 3" and n1["pending"] == "0"
    assert (n2["cpus"], n2["memory"], n2["labels"]) == ("2", "512 MiB", "")
    assert n2["running / capacity"].strip() == "0 / 3"
    assert 'data-running="1" data-capacity="3"' in api.get("/ui/nodes").text


def test_a_service_takes_no_slot_and_the_bar_says_it_runs_besides(
    make_client: ClientFactory,
) -> None:
    """A service alone drew its node full (1 / 1) while the node still took jobs: the bar
    counts the slots of MAX_JOBS_PER_NODE, the services beside it, on both pages."""
    api = make_client(max_jobs_per_node=1)
    api.post("/nodes/register", json={"id": "n1", "hostname": "n1", "cpu_count": 2})
    service = submit(api, command="exec sleep 300", job_type="service", port=18080)
    assert report(api, service["job_id"], "running").status_code == 200
    n1 = node_rows(api.get("/ui/nodes").text)["n1"]
    assert n1["running / capacity"].strip() == "0 / 1 + 1 service"
    job = submit(api, command="sleep 1")
    assert report(api, job["job_id"], "running").status_code == 200  # its slot was free
    page = api.get("/ui/nodes").text
    assert node_rows(page)["n1"]["running / capacity"].strip() == "1 / 1 + 1 service"
    assert 'data-running="1" data-capacity="1"' in page
    assert "1 / 1 + 1 service" in api.get("/ui").text  # the dashboard's nodes
    # A cancelling job holds its slot and is no service; a cancelling service is one still.
    assert api.delete(f"/jobs/{job['job_id']}").json()["status"] == "cancelling"
    page = api.get("/ui/nodes").text
    assert node_rows(page)["n1"]["running / capacity"].strip() == "1 / 1 + 1 service"
    assert api.delete(f"/jobs/{service['job_id']}").json()["status"] == "cancelling"
    page = api.get("/ui/nodes").text
    assert node_rows(page)["n1"]["running / capacity"].strip() == "1 / 1 + 1 service"
    # Not a registered one: the table says what it lists, and where the job is.
    assert ">no services<" in page and "submitted as a service (--service) is listed" in page


def test_the_background_counters_say_what_they_count(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    settings = make_settings()
    client = make_client(settings)
    stats = Keys(settings.redis_prefix).stats
    rclient.hset(stats, mapping={"events_discarded": 44, "brand_new_counter": 2})
    page = client.get("/ui/nodes").text
    row = re.search(
        r'<tr id="counter-events_discarded"><th>(.*?)</th><td class="num">44</td>', page
    )
    assert row and "SNS_URL is not set" in row.group(1)
    # One this page has no words for shows its name, escaped like the rest.
    assert re.search(r'<tr id="counter-brand_new_counter"><th>brand_new_counter ', page)
    assert '<tr id="counter-outbox"><th>job events waiting to be handed to SNS' in page


def test_a_registrys_markup_is_escaped() -> None:
    """An external registry's node (REGISTRY_URL) is not checked as a registration is: its
    labels are shown as text."""
    node = Node(id="n1", cpu_count=4, memory_mb=2048, labels={"<script>": "<b>x</b>"})
    cpus, memory, labels = ui_nodes.offer(node)
    assert (cpus, memory) == ("4", "2.0 GiB")
    assert "<script>" not in labels and "&lt;script&gt;=&lt;b&gt;x&lt;/b&gt;" in labels
    assert ui_nodes.offer(None) == ("", "", "")


def test_past_offers_max_nodes_the_page_points_to_get_nodes(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ui_nodes, "OFFERS_MAX", 1)
    api = make_client()
    for node in ("n1", "n2"):
        body = {"id": node, "hostname": node, "cpu_count": 2}
        assert api.post("/nodes/register", json=body).status_code == 201
    page = api.get("/ui/nodes").text
    assert "GET /nodes lists them for all 2" in page
    assert node_rows(page)["n1"]["running / capacity"].strip() == "0 / 1"
