"""The job's DataFrame queries: exchanges, aggregates, the summary and the plots' data.

Kept apart from :mod:`nfgate.analysis.job` (session, input, output) so that each query
reads as the table it makes. Every function takes the commands DataFrame (the schema of
``job.COMMANDS_SCHEMA``) and returns DataFrames, or small Python values collected from
aggregates (never a whole table) for summary.json and the report.
"""

from __future__ import annotations

import math
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

__all__ = ["plot_data", "summary", "tables"]

_QUANTILES = (0.5, 0.9, 0.99)
TIMELINE_POINTS = 300  # at most this many points on the messages-per-second plot
MIN_STEP_NS = 1_000_000  # and none narrower than a millisecond


def tables(commands: DataFrame) -> dict[str, DataFrame]:
    """Every table the job writes, by its path under ``--out``."""
    # Read by five queries after its own write: cached, or its window and join run five times.
    exchanges = _exchanges(commands).cache()
    return {
        "commands": commands,
        "malformed": commands.where(F.col("error").isNotNull()).select(
            "ts_ns",
            "gateway",
            "edge",
            "protocol",
            "transport",
            "direction",
            "peer",
            "frame_count",
            "error",
            "preview",
        ),
        "exchanges": exchanges,
        "aggregates/protocol": _by_protocol(commands, exchanges),
        "aggregates/service": _by_service(exchanges),
        "aggregates/peer": _by_peer(commands),
    }


def _exchanges(commands: DataFrame) -> DataFrame:
    """Each request with its reply: on the same (gateway, edge, peer, side, key), a reply
    answers the latest request before it that has no reply yet, as a stack matches
    brackets (docs/pipeline.md, "Pairing").

    With unique keys (NFP, MemoDB, SADA) that is the one request of its key. Where a key
    repeats (DCP metadata, DBP's none), the latest open request is the one a client that
    retries with the same metadata waits for, and a DCP or DBP worker holds one request
    at a time. A reply never pairs with a later request, and a reply with no open request
    before it (its request before the capture's window, or a second final answer) pairs
    with none.

    In window terms: ``depth`` is the number of open requests, the running sum of +1 per
    request and -1 per reply, held at 0 by subtracting its running minimum. The request
    that opens depth d and the reply that closes it share ``level`` d; at each level
    requests and replies alternate, so the n-th request of a level pairs with the n-th
    reply of that level. A reply at level 0 closes nothing."""
    part = ["gateway", "edge", "peer", "side", "key"]
    request = F.col("role") == "request"
    # A request read from a peer is its client's, one the gateway sent went to a worker;
    # a reply goes the other way.
    client = (F.col("direction") == "in") == request
    events = (
        commands.where(F.col("role").isin("request", "reply"))
        .withColumn("side", F.when(client, F.lit("client")).otherwise(F.lit("worker")))
        .withColumn("step", F.when(request, F.lit(1)).otherwise(F.lit(-1)))
    )
    # Requests before replies of the same instant: a reply never precedes its request.
    order = Window.partitionBy(*part).orderBy("ts_ns", F.col("step").desc())
    so_far = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    before = order.rowsBetween(Window.unboundedPreceding, -1)
    levelled = (
        events.withColumn("sum", F.sum("step").over(so_far))
        .withColumn("floor", F.coalesce(F.min(F.least(F.col("sum"), F.lit(0))).over(before), F.lit(0)))
        # The depth after a request, the depth before a reply.
        .withColumn("level", F.col("sum") - F.col("floor") + F.when(request, F.lit(0)).otherwise(F.lit(1)))
        .where(F.col("level") > 0)
    )
    numbered = levelled.withColumn(
        "n", F.row_number().over(Window.partitionBy(*part, "level", "step").orderBy("ts_ns"))
    )
    requests = numbered.where(request).select(
        *part, "level", "n", "protocol", "service", F.col("ts_ns").alias("request_ts_ns")
    )
    replies = numbered.where(~request).select(
        *part, "level", "n", F.col("ts_ns").alias("reply_ts_ns"), "status", F.col("type").alias("reply_type")
    )
    return (
        requests.join(replies, on=[*part, "level", "n"], how="left")
        .withColumn("latency_us", (F.col("reply_ts_ns") - F.col("request_ts_ns")) / 1000.0)
        .drop("level", "n")
    )


def _latency(column: str = "latency_us") -> list[Any]:
    q = F.percentile_approx(column, list(_QUANTILES), 10_000)
    return [q[i].alias(f"p{int(x * 100)}_us") for i, x in enumerate(_QUANTILES)]


def _by_protocol(commands: DataFrame, exchanges: DataFrame) -> DataFrame:
    traffic = commands.groupBy("protocol").agg(
        F.sum(F.when(F.col("direction") == "in", 1).otherwise(0)).alias("messages_in"),
        F.sum(F.when(F.col("direction") == "out", 1).otherwise(0)).alias("messages_out"),
        F.sum(F.when(F.col("direction") == "in", F.col("bytes")).otherwise(0)).alias("bytes_in"),
        F.sum(F.when(F.col("direction") == "out", F.col("bytes")).otherwise(0)).alias("bytes_out"),
        F.sum(F.when(F.col("error").isNotNull(), 1).otherwise(0)).alias("malformed"),
        F.countDistinct("peer").alias("peers"),
    )
    clients = (
        exchanges.where(F.col("side") == "client")
        .groupBy("protocol")
        .agg(
            F.count("*").alias("requests"),
            F.count("reply_ts_ns").alias("answered"),
            *_latency(),
        )
    )
    # A protocol with traffic but no client request (DBP's beacons, only malformed input)
    # has 0 requests and 0 answered, not null; its latencies stay null (none measured).
    joined = traffic.join(clients, on="protocol", how="left").fillna(0, subset=["requests", "answered"])
    return joined.orderBy("protocol")


def _by_service(exchanges: DataFrame) -> DataFrame:
    return (
        exchanges.groupBy("service", "side")
        .agg(
            F.count("*").alias("requests"),
            F.count("reply_ts_ns").alias("answered"),
            F.sum(F.when(F.col("status") >= 400, 1).otherwise(0)).alias("errors"),
            F.collect_set("protocol").alias("protocols"),
            *_latency(),
        )
        .orderBy("service", "side")
    )


def _by_peer(commands: DataFrame) -> DataFrame:
    return (
        commands.groupBy("gateway", "edge", "protocol", "peer")
        .agg(
            F.count("*").alias("messages"),
            F.sum("bytes").alias("bytes"),
            F.sum(F.when(F.col("error").isNotNull(), 1).otherwise(0)).alias("malformed"),
            F.min("ts_ns").alias("first_ts_ns"),
            F.max("ts_ns").alias("last_ts_ns"),
            F.collect_set("dialect").alias("dialects"),
        )
        .orderBy(F.desc("messages"), "gateway", "edge", "peer")
    )


def _rows(frame: DataFrame, limit: int | None = None) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in (frame.limit(limit) if limit else frame).collect()]


def summary(
    commands: DataFrame, tables: dict[str, DataFrame], *, files: int, top_peers: int
) -> dict[str, Any]:
    """What summary.json holds: totals, the protocol and service aggregates, the busiest
    peers and the malformed messages' reasons."""
    totals = commands.agg(
        F.count("*").alias("messages"),
        F.sum("bytes").alias("bytes"),
        F.min("ts_ns").alias("first_ts_ns"),
        F.max("ts_ns").alias("last_ts_ns"),
        F.sum(F.when(F.col("error").isNotNull(), 1).otherwise(0)).alias("malformed"),
    ).collect()[0]  # an aggregate without grouping has exactly one row
    exchanges = tables["exchanges"]
    reasons = (
        tables["malformed"].groupBy("protocol", "error").count().orderBy(F.desc("count"), "protocol", "error")
    )
    return {
        "segments": files,
        "messages": totals["messages"],
        "bytes": totals["bytes"] or 0,
        "malformed": totals["malformed"] or 0,
        "first_ts_ns": totals["first_ts_ns"],
        "last_ts_ns": totals["last_ts_ns"],
        "exchanges": exchanges.count(),
        "unanswered": exchanges.where(F.col("reply_ts_ns").isNull()).count(),
        "protocols": _rows(tables["aggregates/protocol"]),
        "services": _rows(tables["aggregates/service"]),
        "peers": _rows(tables["aggregates/peer"], top_peers),
        "malformed_reasons": _rows(reasons, 50),
    }


def plot_data(commands: DataFrame, exchanges: DataFrame) -> dict[str, Any]:
    """Small aggregates for the report's plots: the client-side latency histogram per
    protocol (10 buckets per decade) and messages per time bucket per protocol."""
    bucket = F.floor(F.log10(F.greatest(F.col("latency_us"), F.lit(1.0))) * 10)
    latency = (
        exchanges.where((F.col("side") == "client") & F.col("latency_us").isNotNull())
        .groupBy("protocol", bucket.alias("bucket"))
        .count()
        .orderBy("protocol", "bucket")
    )
    span = commands.agg(F.min("ts_ns").alias("lo"), F.max("ts_ns").alias("hi")).collect()[0]
    timeline: list[dict[str, Any]] = []
    width_ns = MIN_STEP_NS
    if span["lo"] is not None:
        width_ns = max(MIN_STEP_NS, math.ceil((span["hi"] - span["lo"]) / TIMELINE_POINTS))
        step = F.floor((F.col("ts_ns") - F.lit(span["lo"])) / F.lit(width_ns))
        # A record without a time (a capture not written by nfgate) has no place on it.
        timed = commands.where(F.col("ts_ns").isNotNull())
        timeline = _rows(timed.groupBy("protocol", step.alias("step")).count().orderBy("protocol", "step"))
    return {"latency": _rows(latency), "timeline": timeline, "timeline_step_ns": width_ns}
