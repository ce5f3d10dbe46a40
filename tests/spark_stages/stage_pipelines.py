"""A pipeline with a heavy aggregation handed to Spark, as a user module declares it."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention

from cadenza import Pipeline


class Sale(BaseModel):
    region: str
    amount: float
    ts: float


class Span(BaseModel):
    start: datetime
    end: datetime


class RegionTotal(BaseModel):
    window: Span
    region: str
    total: float
    sales: int


def totals_per_region(df: DataFrame) -> DataFrame:
    return df.groupBy(F.window("event_time", "10 seconds"), "region").agg(
        F.sum("amount").alias("total"), F.count(F.lit(1)).alias("sales")
    )


sales = Pipeline("sales", tenant="finance", latency_target="3s")
(
    sales.source("sales-in", value=Sale)
    .filter(lambda s: s.amount >= 0)
    .on_spark(
        totals_per_region,
        topic="sales-totals",
        value=RegionTotal,
        event_time="ts",
        watermark="5s",
        output_mode="update",
    )
    .sink("sales-report")
)
