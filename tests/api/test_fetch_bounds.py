"""POST /v1/fetch within bounds (issue 22): gzip bombs, Content-Encodings good and broken, the
byte budget of a whole request, hostile PDFs and an extractor that stops when its answer is
no longer awaited. The web site is the real WebsiteFake on 127.0.0.1; the gateway is the live
server of the other fetch tests, in this process, so its memory is this process's memory."""

from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pypdf
import pytest

from fake_upstreams.website import ENCODED_TEXT, encoded, gzip_bomb, many_page_pdf, tiny_pdf
from inference import extract as extraction
from inference.providers import fetch as fetcher

pytestmark = pytest.mark.django_db(transaction=True)

MB = 1024 * 1024


@pytest.fixture
def site(website, catalog):
    return website


def fetch(client, auth, body):
    response = client.post("/v1/fetch", json=body, headers=auth)
    assert response.status_code == 200, response.text
    return response.json()["results"]


def memory(field: str) -> int:
    """This process's VmRSS or VmHWM (peak) in bytes: the gateway serves from a thread of it."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field}")


def reset_peak() -> bool:
    """Start VmHWM again from the current RSS (Linux 4.0+); False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


def extractors_idle_after() -> float:
    """Seconds until both extractor threads are free: two tasks that can only finish together
    (a barrier of two), so neither thread may still be busy with an abandoned extraction."""
    barrier = threading.Barrier(2, timeout=30)
    started = time.perf_counter()
    futures = [fetcher._EXTRACTORS.submit(barrier.wait) for _ in range(2)]
    for future in futures:
        future.result(timeout=30)
    return time.perf_counter() - started


# --- decompression bombs -----------------------------------------------------------------------


@pytest.fixture
def bombing(site, gateway, auth):
    """Runs `requests` requests of ten gzip-bomb URLs (1 MB that inflates to 1 GiB) at once,
    while another client asks GET /v1/models of the same server over and over; returns the
    answers and the figures: memory before and at its peak, the latencies of /v1/models."""
    assert len(gzip_bomb(1024)) < 1.1 * MB  # built (and cached) before measuring

    def ten(path, n):
        urls = [f"{site.origin}/{path}?request={n}&url={i}" for i in range(10)]
        with httpx.Client(base_url=gateway.url, timeout=60) as http:
            return fetch(http, auth, {"urls": urls})

    def run(requests: int) -> dict:
        with ThreadPoolExecutor(requests) as pool:  # the same with small pages: all warm
            warm = list(pool.map(functools.partial(ten, "notes.txt"), range(requests)))
        assert [page["status"] for answer in warm for page in answer] == ["ok"] * 10 * requests
        site.clear()
        latencies: list[float] = []
        rss = [memory("VmRSS")]
        hwm = reset_peak()
        under_fire = threading.Event()
        done = threading.Event()

        def models():
            with httpx.Client(base_url=gateway.url, timeout=30) as http:
                while not done.is_set():
                    started = time.perf_counter()
                    response = http.get("/v1/models", headers=auth)
                    elapsed = time.perf_counter() - started
                    assert response.status_code == 200
                    if under_fire.is_set():
                        latencies.append(elapsed)
                    rss.append(memory("VmRSS"))

        prober = threading.Thread(target=models)
        prober.start()
        try:
            while len(rss) < 3:  # the probe's connection is warm before the bombs start
                time.sleep(0.001)
            under_fire.set()
            started = time.perf_counter()
            with ThreadPoolExecutor(requests) as pool:
                answers = list(pool.map(functools.partial(ten, "bomb"), range(requests)))
            duration = time.perf_counter() - started
        finally:
            done.set()
            prober.join(timeout=30)
        peak = max(max(rss), memory("VmHWM") if hwm else 0)
        figures = {
            "duration": duration,
            "before": rss[0],
            "peak": peak,
            "growth": peak - rss[0],
            "latencies": latencies,
        }
        print(
            f"\n{requests} x 10 bombs in {duration:.2f} s: RSS before {rss[0] / MB:.0f} MB, "
            f"peak {peak / MB:.0f} MB (+{(peak - rss[0]) / MB:.1f} MB); /v1/models meanwhile: "
            f"{len(latencies)} requests, max {max(latencies, default=0) * 1000:.1f} ms, "
            f"median {sorted(latencies)[len(latencies) // 2] * 1000 if latencies else 0:.1f} ms"
        )
        pages = [page for answer in answers for page in answer]
        assert len(pages) == 10 * requests
        assert {page["error"]["code"] for page in pages} == {"too_large"}, pages
        # Inflating one bomb whole takes seconds of CPU (1 GiB): each was left after a few KB.
        assert duration < 5 * requests
        assert latencies, "no /v1/models request ran while the bombs were fetched"
        return figures

    return run


def assert_not_stalled(latencies: list[float]) -> None:
    """/v1/models answered quickly while the bombs were fetched, for nineteen requests in twenty;
    none waited a second (before: stalled 5.5 s). The issue's bound was 100 ms on an idle
    machine; CI runs two test lanes on its two cores, where an answer that is not stalled at all
    measured 105 ms, so the bound here is 250 ms: still twenty times under the stall it guards
    against. The twentieth may meet a garbage collection: a bound on the maximum alone would
    make the test flaky, not stricter."""
    ordered = sorted(latencies)
    assert ordered[int(len(ordered) * 0.95)] < 0.25, ordered
    assert ordered[-1] < 1.0, ordered


def test_ten_gzip_bombs_in_one_request(bombing):
    """The issue's request: RSS 308 -> 951 MB and other requests stalled 5.5 s."""
    figures = bombing(1)
    assert figures["growth"] < 100 * MB
    assert_not_stalled(figures["latencies"])


def test_three_bomb_requests_at_once(bombing, settings):
    """The issue's worst case (RSS to 1,555 MB, other requests stalled 18.3 s): each request
    holds at most GATEWAY_FETCH_MAX_TOTAL_BYTES (20 MiB) of bodies."""
    figures = bombing(3)
    assert figures["growth"] < 3 * settings.GATEWAY["FETCH_MAX_TOTAL_BYTES"] + 50 * MB
    assert_not_stalled(figures["latencies"])


def test_one_url_over_the_request_budget(client, auth, site, settings):
    settings.GATEWAY = {**settings.GATEWAY, "FETCH_MAX_TOTAL_BYTES": 1_500_000}
    site.huge_bytes = 2_000_000  # under the per-URL 5 MiB, over the request's 1.5 MB
    big, small = fetch(client, auth, {"urls": [f"{site.origin}/huge", f"{site.origin}/notes.txt"]})
    assert big["error"] == {
        "code": "too_large",
        "message": "The pages of this request are larger than 1500000 bytes",
    }
    assert small["status"] == "ok"


def test_the_request_budget_is_given_back_when_a_body_is_dropped(settings):
    budget = fetcher.Budget(100)
    budget.take(60)
    with pytest.raises(fetcher.ssrf.Refused):
        budget.take(41)  # refused before it is counted
    assert budget.held == 60
    budget.give_back(60)
    budget.take(100)


# --- Content-Encoding --------------------------------------------------------------------------


def test_encodings_we_inflate(client, auth, site):
    kinds = ["identity", "gzip", "x-gzip", "deflate", "raw-deflate", "two-members"]
    pages = fetch(client, auth, {"urls": [f"{site.origin}/encoded?as={k}" for k in kinds]})
    assert [page["content"] for page in pages] == [ENCODED_TEXT.decode()] * len(kinds), pages
    assert {r.headers["accept-encoding"] for r in site.requests} == {"gzip, deflate"}


@pytest.mark.parametrize(
    ("kind", "code", "message"),
    [
        ("br", "unsupported_encoding", "Content encoding 'br' is not supported"),
        ("zstd", "unsupported_encoding", "Content encoding 'zstd' is not supported"),
        ("gzip-twice", "unsupported_encoding", "Content encoding 'gzip, gzip' is not supported"),
        ("truncated", "unreadable_content", "The page's gzip data is damaged"),
        ("garbage", "unreadable_content", "The page's gzip data is damaged"),
        ("not-gzip", "unreadable_content", "The page's gzip data is damaged"),
    ],
)
def test_encodings_we_refuse(client, auth, site, kind, code, message):
    urls = [f"{site.origin}/encoded?as={kind}", f"{site.origin}/encoded?as=gzip"]
    refused, fine = fetch(client, auth, {"urls": urls})
    assert refused["error"] == {"code": code, "message": message}
    assert refused["content"] is None
    assert fine["status"] == "ok"


def test_inflating_in_steps():
    """Never more than one step of output per call into zlib, whatever one read holds."""
    inflater = fetcher.Inflater("gzip")
    bomb = gzip_bomb(8)
    pieces = [len(p) for p in inflater.feed(bomb[:4000])]
    assert max(pieces) <= fetcher.INFLATE_STEP
    assert sum(pieces) > 3 * MB
    for piece in inflater.feed(bomb[4000:]):
        assert len(piece) <= fetcher.INFLATE_STEP
    list(inflater.finish())


@pytest.mark.parametrize("kind", ["gzip", "deflate", "raw-deflate", "two-members"])
def test_inflating_one_byte_at_a_time(kind):
    """Network reads can split a body anywhere: in a header, between two gzip members."""
    coding, body = encoded(kind)
    inflater = fetcher.Inflater(coding)
    out = b"".join(piece for i in range(len(body)) for piece in inflater.feed(body[i : i + 1]))
    assert out + b"".join(inflater.finish()) == ENCODED_TEXT
    for broken in (body[:-1], body + b"x", body[:1]):
        inflater = fetcher.Inflater(coding)
        with pytest.raises(fetcher.ssrf.Refused) as refused:
            list(inflater.feed(broken))
            list(inflater.finish())
        assert refused.value.code == "unreadable_content"


# --- extraction --------------------------------------------------------------------------------


@pytest.fixture
def extractions(monkeypatch):
    """Each extraction's thread CPU time and the moment it ended (the real extractor runs)."""
    runs: list[tuple[float, float]] = []
    real = fetcher.extract

    def measured(*args):
        cpu = time.thread_time()
        try:
            return real(*args)
        finally:
            runs.append((time.thread_time() - cpu, time.perf_counter()))

    monkeypatch.setattr(fetcher, "extract", measured)
    return runs


def test_hostile_pdf_is_refused_within_a_bound(client, auth, site, extractions):
    """Four 25,000-page PDFs (the issue's request: 34.8 CPU-s, busy 20 s after its answer)."""
    pdf = many_page_pdf(25_000)
    assert len(pdf) < 5 * 10**6
    urls = [f"{site.origin}/pages.pdf?url={i}" for i in range(4)]
    started = time.perf_counter()
    pages = fetch(client, auth, {"urls": urls})
    answered = time.perf_counter()
    idle = extractors_idle_after()
    assert [page["error"] for page in pages] == [
        {"code": "unreadable_content", "message": "The PDF has more than 1000 pages"}
    ] * 4
    cpu = sum(run for run, _ in extractions)
    after = sum(max(0.0, end - answered) for _, end in extractions)
    print(
        f"\n4 x 25,000-page PDFs answered in {answered - started:.2f} s; extractor CPU "
        f"{cpu:.2f} s in all, {after * 1000:.1f} ms after the answer; pool idle after "
        f"{idle * 1000:.1f} ms"
    )
    assert len(extractions) == 4
    assert answered - started < 10
    assert after < 0.05 and idle < 0.5


def test_pdf_within_the_page_cap_is_read(client, auth, site, settings):
    settings.GATEWAY = {**settings.GATEWAY, "FETCH_MAX_PDF_PAGES": 25}
    urls = [f"{site.origin}/pages.pdf?pages={n}" for n in (25, 26)] + [f"{site.origin}/paper.pdf"]
    drawings, over, paper = fetch(client, auth, {"urls": urls})
    assert drawings["status"] == "ok" and drawings["content"] == ""  # no text on its pages
    assert over["error"]["message"] == "The PDF has more than 25 pages"
    assert paper["content"] == "Mitochondria are the powerhouse of the cell"


def costly_pages(settings, monkeypatch) -> list[int]:
    """Every PDF page costs 20 ms of CPU to extract and a URL has 1 s; returns the list that
    grows by one per page read."""
    settings.GATEWAY = {**settings.GATEWAY, "FETCH_TIMEOUT": 1.0}
    read: list[int] = []
    real = pypdf.PageObject.extract_text

    def costly(page, *args, **kwargs):
        read.append(1)
        spent = time.thread_time()
        while time.thread_time() - spent < 0.02:  # CPU work, not a sleep
            pass
        return real(page, *args, **kwargs)

    monkeypatch.setattr(pypdf.PageObject, "extract_text", costly)
    return read


def test_an_abandoned_extraction_stops_at_the_next_page(
    client, auth, site, settings, monkeypatch, extractions
):
    """Pages that cost 20 ms of CPU each (1,000 of them: 20 s) and a URL deadline of 1 s: the
    URL times out and its extractor stops at the next page instead of running on for nobody."""
    read = costly_pages(settings, monkeypatch)
    started = time.perf_counter()
    (page,) = fetch(client, auth, {"urls": [f"{site.origin}/pages.pdf?pages=1000"]})
    answered = time.perf_counter()
    idle = extractors_idle_after()
    assert page["error"] == {"code": "timeout", "message": "No complete answer within 1 seconds"}
    (run,) = extractions
    after = max(0.0, run[1] - answered)
    print(
        f"\nabandoned PDF: answered in {answered - started:.2f} s, {len(read)} of 1000 pages "
        f"read, extractor CPU {run[0]:.2f} s, {after * 1000:.1f} ms of it after the answer"
    )
    assert len(read) < 1000
    assert after < 0.2 and idle < 0.5


def test_one_request_cannot_take_both_extractor_threads(
    client, auth, site, settings, monkeypatch, gateway
):
    """A request of two costly PDFs (20 ms of CPU a page, 1,000 pages each, until its 1 s
    deadline) uses one extractor thread: another request's PDF is read on the other at once."""
    read = costly_pages(settings, monkeypatch)
    hostile = [f"{site.origin}/pages.pdf?pages=1000&url={i}" for i in range(2)]

    def attack():
        with httpx.Client(base_url=gateway.url, timeout=30) as http:
            return fetch(http, auth, {"urls": hostile})

    with ThreadPoolExecutor(1) as pool:
        attacked = pool.submit(attack)
        while not read and not attacked.done():  # its first extraction is under way
            time.sleep(0.001)
        started = time.perf_counter()
        (paper,) = fetch(client, auth, {"urls": [f"{site.origin}/paper.pdf"]})
        latency = time.perf_counter() - started
        pages = attacked.result()
    print(f"\nanother request's PDF during a hostile one: {latency * 1000:.0f} ms")
    assert paper["content"] == "Mitochondria are the powerhouse of the cell"
    # Waiting for the hostile request's thread would take its whole 1 s deadline.
    assert latency < 0.8
    assert [page["error"]["code"] for page in pages] == ["timeout", "timeout"]


def test_extraction_limits_checked_between_pages(monkeypatch):
    pdf = many_page_pdf(50)
    stop = threading.Event()
    read: list[int] = []
    real = pypdf.PageObject.extract_text

    def counting(page, *args, **kwargs):
        read.append(1)
        if len(read) == 10:
            stop.set()  # the fetcher gave up on this URL while page 10 was read
        return real(page, *args, **kwargs)

    monkeypatch.setattr(pypdf.PageObject, "extract_text", counting)
    limits = extraction.Limits(stop=stop)
    with pytest.raises(extraction.Stopped):
        extraction.extract(pdf, "application/pdf", None, "http://x/", "text", limits)
    assert len(read) == 10
    late = extraction.Limits(deadline=time.monotonic() - 1)
    with pytest.raises(extraction.Stopped):  # waited in the queue past its deadline: not begun
        extraction.extract(b"<p>x</p>", "text/html", None, "http://x/", "text", late)


def test_characters_cap_a_pdf_and_text():
    limits = extraction.Limits(max_characters=5)
    pdf = tiny_pdf("word " * 20)
    _, content = extraction.extract(pdf, "application/pdf", None, "http://x/", "text", limits)
    assert content.startswith("word")  # the page that passed the cap, cut later by the fetcher
    _, content = extraction.extract(b"a" * 100, "text/plain", None, "http://x/", "text", limits)
    assert len(content) == 20  # 4 bytes a character at most: the rest is never decoded


def test_html_past_the_cap_is_not_handed_to_trafilatura():
    filler = b"<!-- " + b"x" * extraction.HTML_MAX_BYTES + b" -->"
    html = b"<html><body><article><p>" + b"Visible start of the page. " * 20 + b"</p>"
    html += filler + b"<p>Text after the cap.</p></article></body></html>"
    limits = extraction.Limits()
    _, content = extraction.extract(html, "text/html", "utf-8", "http://x/", "text", limits)
    assert "Visible start" in content and "after the cap" not in content
