"""The report's SQL (one dialect for chDB and a server). `{db}` is the database identifier; values go
as ClickHouse {name:Type} parameters: t0 (ms), bucket_ms, pass (the pass threshold), since (ms: rows
before it are left out; 0 = all; the studio's dashboard shows one run of a reused state folder).

Every table is read with FINAL, so re-delivered messages never count twice. "RL" experiences are the
explorers' (raw topic, source != expert); demonstrations are left out of reward and staleness figures.
"""

from __future__ import annotations

MS = "toUnixTimestamp64Milli"


def bucket(col: str) -> str:
    return f"intDiv({MS}({col}) - {{t0:Int64}}, {{bucket_ms:Int64}})"


SPAN = """
SELECT min(ms) AS t0, max(ms) AS t1, count() AS n FROM (
  SELECT {MS}(kafka_ts) AS ms FROM {db}.experiences FINAL
  UNION ALL SELECT {MS}(kafka_ts) FROM {db}.rejections FINAL
  UNION ALL SELECT {MS}(kafka_ts) FROM {db}.feedback FINAL
  UNION ALL SELECT {MS}(trained_at) FROM {db}.trained FINAL
)"""

REWARD_BY_VERSION = """
SELECT model_version AS version, count() AS n, avg(reward) AS mean, stddevPop(reward) AS sd,
       avg(reward >= {{pass:Float64}}) AS pass_rate
FROM {db}.experiences FINAL
WHERE topic = 'raw' AND source != 'expert' AND reward IS NOT NULL AND {MS}(kafka_ts) >= {{since:Int64}}
GROUP BY version ORDER BY version"""

STALENESS = """
SELECT staleness, count() AS n
FROM {db}.trained FINAL
WHERE experience_id NOT IN (SELECT experience_id FROM {db}.experiences WHERE topic = 'expert')
  AND {MS}(trained_at) >= {{since:Int64}}
GROUP BY staleness ORDER BY staleness"""

REJECTIONS = """
SELECT {b} AS b, reason, sum(greatest(length(experience_ids), 1)) AS n
FROM {db}.rejections FINAL
WHERE {MS}(kafka_ts) >= {{since:Int64}}
GROUP BY b, reason ORDER BY b, reason"""

THROUGHPUT = """
SELECT stage, b, count() AS n FROM (
  SELECT 'produced' AS stage, {b_exp} AS b FROM {db}.experiences FINAL
    WHERE topic = 'raw' AND {MS}(kafka_ts) >= {{since:Int64}}
  UNION ALL SELECT 'curated', {b_exp} FROM {db}.experiences FINAL
    WHERE topic IN ('curated', 'curated_priority') AND {MS}(kafka_ts) >= {{since:Int64}}
  UNION ALL SELECT 'trained', {b_tr} FROM {db}.trained FINAL
    WHERE experience_id NOT IN (SELECT experience_id FROM {db}.experiences WHERE topic = 'expert')
      AND {MS}(trained_at) >= {{since:Int64}}
  UNION ALL SELECT 'rejected', {b_exp} FROM {db}.rejections FINAL ARRAY JOIN if(empty(experience_ids), [''],
    experience_ids) AS rejected_id WHERE {MS}(kafka_ts) >= {{since:Int64}}
)
GROUP BY stage, b ORDER BY stage, b"""

# Per experience, the time between the stages: generation done (created_at) -> on the raw topic ->
# on a curated lane (streams) -> in a durable trainer step (the lineage's step time).
LATENCY = """
WITH
  r AS (SELECT experience_id, any({MS}(kafka_ts)) AS raw_ms, any({MS}(created_at)) AS created_ms
        FROM {db}.experiences FINAL WHERE topic = 'raw' GROUP BY experience_id),
  c AS (SELECT experience_id, min({MS}(kafka_ts)) AS cur_ms
        FROM {db}.experiences FINAL WHERE topic IN ('curated', 'curated_priority') GROUP BY experience_id),
  t AS (SELECT experience_id, min({MS}(trained_at)) AS tr_ms FROM {db}.trained FINAL GROUP BY experience_id)
SELECT stage, ms FROM (
  SELECT 1 AS o, 'created → raw' AS stage, raw_ms - created_ms AS ms FROM r
  UNION ALL SELECT 2, 'raw → curated', cur_ms - raw_ms FROM r INNER JOIN c USING experience_id
  UNION ALL SELECT 3, 'curated → trained', tr_ms - cur_ms FROM c INNER JOIN t USING experience_id
  UNION ALL SELECT 4, 'created → trained', tr_ms - created_ms FROM r INNER JOIN t USING experience_id
)
ORDER BY o
LIMIT 500000"""

TASK_PASS = """
SELECT e.task_id AS task_id, count() AS n, countIf(e.reward >= {{pass:Float64}}) AS passes, passes / n AS rate,
       avg(e.reward) AS mean_reward, any(t.prompt) AS prompt
FROM (SELECT task_id, reward FROM {db}.experiences FINAL
      WHERE topic = 'raw' AND source != 'expert' AND reward IS NOT NULL) AS e
LEFT JOIN (SELECT task_id, any(prompt) AS prompt FROM {db}.tasks FINAL GROUP BY task_id) AS t
  ON e.task_id = t.task_id
GROUP BY task_id ORDER BY rate, n DESC, task_id"""

FEEDBACK_VOLUME = """
SELECT {b} AS b, kind, count() AS n
FROM {db}.feedback FINAL
GROUP BY b, kind ORDER BY b, kind"""

# A feedback's verdict: thumbs up/down, or a reward at/above the pass threshold; other kinds have none.
_VERDICTS = """
  SELECT experience_id, kind,
         multiIf(kind = 'thumbs', toUInt8(thumbs_up), kind = 'reward', toUInt8(reward >= {{pass:Float64}}), NULL) AS verdict
  FROM {db}.feedback FINAL"""

# Agreement with the experience's own (automatic) reward verdict.
FEEDBACK_AGREEMENT = """
SELECT f.kind AS kind, count() AS n, countIf(f.verdict = e.verdict) AS agree, agree / n AS rate
FROM (""" + _VERDICTS + """) AS f
INNER JOIN (SELECT experience_id, toUInt8(any(reward) >= {{pass:Float64}}) AS verdict FROM {db}.experiences FINAL
            WHERE topic = 'raw' AND reward IS NOT NULL GROUP BY experience_id) AS e
  ON f.experience_id = e.experience_id
WHERE f.verdict IS NOT NULL
GROUP BY kind ORDER BY kind"""

# Agreement among annotators: experiences with two or more verdicts, all the same.
FEEDBACK_CONSENSUS = """
SELECT count() AS experiences, countIf(lo = hi) AS unanimous FROM (
  SELECT experience_id, min(verdict) AS lo, max(verdict) AS hi, count() AS c
  FROM (""" + _VERDICTS + """) WHERE verdict IS NOT NULL
  GROUP BY experience_id HAVING c >= 2
)"""

# Per graded answer (a live or human experience with a feedback record): how late its first grade came, in seconds
# from the answer and in versions (the newest weight version published by then less the answer's own version).
_FEEDBACK_DELAY_ROWS = """
WITH
  e AS (SELECT experience_id, any({MS}(created_at)) AS answered_ms, any(model_version) AS v
        FROM {db}.experiences FINAL WHERE topic = 'raw' AND source IN ('live', 'human', 'trace') GROUP BY experience_id),
  f AS (SELECT experience_id, min({MS}(created_at)) AS graded_ms FROM {db}.feedback FINAL
        WHERE experience_id != '' GROUP BY experience_id),
  w AS (SELECT 1 AS k, {MS}(created_at) AS ms, version FROM {db}.weights FINAL)
SELECT x.experience_id AS experience_id, (x.graded_ms - x.answered_ms) / 1000 AS delay_s,
       greatest(toInt64(w.version) - x.v, 0) AS delay_versions
FROM (SELECT 1 AS k, e.experience_id AS experience_id, e.answered_ms AS answered_ms, e.v AS v, f.graded_ms AS graded_ms
      FROM e INNER JOIN f ON e.experience_id = f.experience_id
      WHERE f.graded_ms >= {{since:Int64}}) AS x
ASOF LEFT JOIN w ON x.k = w.k AND x.graded_ms >= w.ms"""

FEEDBACK_DELAY = _FEEDBACK_DELAY_ROWS + """
ORDER BY delay_s
LIMIT 500000"""

# The same, counted per delay in versions (the studio's panel): how many, and their delay in seconds.
FEEDBACK_DELAY_BY_VERSIONS = """
SELECT delay_versions, count() AS n, quantileExact(0.5)(delay_s) AS p50_s, max(delay_s) AS max_s
FROM (""" + _FEEDBACK_DELAY_ROWS + """)
GROUP BY delay_versions ORDER BY delay_versions"""

UNDECODABLE = """
SELECT topic, reason, count() AS n FROM {db}.undecodable FINAL GROUP BY topic, reason ORDER BY topic, reason"""

TRAINER = """
SELECT (SELECT max(version) FROM {db}.weights FINAL) AS versions,
       (SELECT max(step) FROM {db}.metrics FINAL WHERE kind = 'metric') AS steps"""


def sql(template: str, db: str) -> str:
    return template.format(db=db, MS=MS, b=bucket("kafka_ts"), b_exp=bucket("kafka_ts"), b_tr=bucket("trained_at"))
