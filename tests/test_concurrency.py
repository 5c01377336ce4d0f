"""A slow synchronous predict runs in the thread pool: requests overlap and health stays fast."""
import asyncio
import time

from rawhttp import request


async def _post(port: int, path: str, body: bytes) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                 % (path.encode(), len(body), body))
    await writer.drain()
    data = await reader.read()
    writer.close()
    return int(data.split(b" ", 2)[1])


async def _health_latencies(port: int, stop: asyncio.Event, out: list) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        status = await asyncio.get_running_loop().run_in_executor(None, lambda: request(port, "GET", "/v2/health/live")[0])
        out.append((status, time.perf_counter() - start))
        await asyncio.sleep(0.02)


def test_64_slow_requests_overlap_and_health_stays_fast(zoo):
    async def main():
        stop = asyncio.Event()
        health: list = []
        prober = asyncio.create_task(_health_latencies(zoo.http_port, stop, health))
        start = time.perf_counter()
        statuses = await asyncio.wait_for(asyncio.gather(
            *[_post(zoo.http_port, "/v1/models/slow:predict", b'{"instances": [1]}') for _ in range(64)]), 30)
        elapsed = time.perf_counter() - start
        stop.set()
        await prober
        return statuses, elapsed, health

    statuses, elapsed, health = asyncio.run(main())
    assert statuses == [200] * 64
    # Serially this is 64 x 0.2 s = 12.8 s; the pool (min(32, cpus + 4) threads) overlaps them.
    assert elapsed < 12.8 / 2, elapsed
    assert len(health) >= 5
    assert all(status == 200 for status, _ in health)
    assert max(latency for _, latency in health) < 0.05, health
