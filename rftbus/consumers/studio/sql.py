"""The studio's SQL (one dialect for chDB and a server), formatted like report_sql: `{db}` the database,
values as ClickHouse {name:Type} parameters. Every table is read with FINAL (a re-delivered message counts
once); live experiences are the raw topic's rows with source = 'live', or 'trace' (a model call read from an agent's
OpenTelemetry trace: graded the same way, by its experience id).
"""

from __future__ import annotations

# Live answers still waiting for a grade: recorded within the join's TTL, not graded (by any kind of
# feedback, a preference included), not yet released by the streams (curated or rejected).
QUEUE = """
SELECT experience_id, group_id, task_id, sample_index, group_size, model_version AS version,
       prompt_text AS prompt, response_text AS response, {MS}(created_at) AS created_ms, length(image_sha256) AS images
FROM {db}.experiences FINAL
WHERE topic = 'raw' AND source IN ('live', 'trace')
  AND {MS}(created_at) >= {since_ms:Int64}
  AND ({task:String} = '' OR task_id = {task:String})
  AND experience_id NOT IN (
    SELECT arrayJoin([experience_id, ifNull(preferred_id, ''), ifNull(rejected_id, '')]) FROM {db}.feedback)
  AND group_id NOT IN (SELECT group_id FROM {db}.experiences
                       WHERE topic IN ('curated', 'curated_priority') AND source IN ('live', 'trace'))
  AND group_id NOT IN (SELECT ifNull(group_id, '') FROM {db}.rejections)
ORDER BY created_at {order}, group_id, sample_index
LIMIT {limit:UInt32}"""

QUEUE_TASKS = """
SELECT task_id, count() AS n FROM {db}.experiences FINAL
WHERE topic = 'raw' AND source IN ('live', 'trace') AND {MS}(created_at) >= {since_ms:Int64}
GROUP BY task_id ORDER BY n DESC, task_id LIMIT 200"""

# What one grader posted (the studio stamps its annotator), newest first, with the answer it graded.
MINE = """
SELECT f.feedback_id AS feedback_id, f.experience_id AS experience_id, f.kind AS kind, f.reward AS reward,
       f.rating AS rating, f.thumbs_up AS thumbs_up, f.preferred_id AS preferred_id, f.correction AS correction,
       {MS}(f.created_at) AS created_ms, e.response AS response
FROM (SELECT * FROM {db}.feedback FINAL WHERE annotator = {me:String}) AS f
LEFT JOIN (SELECT experience_id, any(response_text) AS response FROM {db}.experiences
           WHERE topic = 'raw' GROUP BY experience_id) AS e ON f.experience_id = e.experience_id
ORDER BY f.created_at DESC LIMIT {limit:UInt32}"""

# -- dashboard ---------------------------------------------------------------------------------------
EVAL = """
SELECT version, step, values['reward'] AS reward, {MS}(created_at) AS ms
FROM {db}.metrics FINAL WHERE kind = 'eval' AND mapContains(values, 'reward') AND {MS}(kafka_ts) >= {since:Int64}
ORDER BY created_at"""

# The grade (mapped to a reward by the streams) of the answers served, by when they were served.
LIVE_REWARD = """
SELECT intDiv({MS}(created_at) - {t0:Int64}, {bucket_ms:Int64}) AS b, avg(reward) AS mean, count() AS n
FROM {db}.experiences FINAL
WHERE topic IN ('curated', 'curated_priority') AND source IN ('live', 'trace') AND reward IS NOT NULL
  AND {MS}(kafka_ts) >= {since:Int64}
GROUP BY b ORDER BY b"""

# The promotion gate's decisions (newest first; an inconclusive look is left out), with the test's numbers.
DECISIONS = """
SELECT decision, version, lineage, serving, serving_lineage, candidate, canary_share, reason,
       evidence['n_serving'] AS n_s, evidence['n_candidate'] AS n_c, evidence['mean_serving'] AS mean_s,
       evidence['mean_candidate'] AS mean_c, evidence['z'] AS z, evidence['z_crit'] AS z_crit,
       mapContains(evidence, 'z') AS tested, {MS}(created_at) AS ms
FROM {db}.decisions FINAL WHERE decision != 'hold' AND {MS}(kafka_ts) >= {since:Int64}
ORDER BY created_at DESC LIMIT 30"""

# Kafka timestamps of everything the dashboard draws: its time axis.
SPAN = """
SELECT min(ms) AS t0, max(ms) AS t1 FROM (
  SELECT {MS}(kafka_ts) AS ms FROM {db}.experiences
  UNION ALL SELECT {MS}(kafka_ts) FROM {db}.rejections
  UNION ALL SELECT {MS}(trained_at) FROM {db}.trained
) WHERE ms >= {since:Int64}"""

# Where a group's record with its images is (its raw record, else any), and the images' hashes the sink saw.
IMAGES_AT = """
SELECT kafka_topic, partition, offset, image_sha256 FROM {db}.experiences FINAL
WHERE group_id = {id:String} AND notEmpty(image_sha256)
ORDER BY topic != 'raw', kafka_ts LIMIT 1"""

# -- the path of an experience, a group or a task ------------------------------------------------------
FIND = """
SELECT topic, experience_id, group_id, task_id, sample_index, group_size, model_version AS version, source,
       reward, advantage, prompt_text AS prompt, response_text AS response, finish_reason, explorer_id,
       {MS}(created_at) AS created_ms, {MS}(kafka_ts) AS kafka_ms, kafka_topic, partition, offset,
       length(image_sha256) AS images
FROM {db}.experiences FINAL
WHERE experience_id = {id:String} OR group_id = {id:String} OR task_id = {id:String}
ORDER BY kafka_ts, sample_index LIMIT {limit:UInt32}"""

REJECTED = """
SELECT rejection_id, experience_id, group_id, experience_ids, reason, detail, stage, {MS}(kafka_ts) AS ms
FROM {db}.rejections FINAL
WHERE hasAny(experience_ids, {ids:Array(String)}) OR has({ids:Array(String)}, ifNull(experience_id, ''))
   OR has({groups:Array(String)}, ifNull(group_id, ''))
ORDER BY kafka_ts"""

TRAINED = """
SELECT experience_id, step, version, staleness, {MS}(trained_at) AS ms
FROM {db}.trained FINAL WHERE has({ids:Array(String)}, experience_id) ORDER BY trained_at"""

FEEDBACK_OF = """
SELECT feedback_id, experience_id, kind, reward, rating, thumbs_up, preferred_id, rejected_id, correction,
       annotator, {MS}(kafka_ts) AS ms
FROM {db}.feedback FINAL
WHERE has({ids:Array(String)}, experience_id) OR has({ids:Array(String)}, ifNull(preferred_id, ''))
   OR has({ids:Array(String)}, ifNull(rejected_id, ''))
ORDER BY kafka_ts"""

WEIGHTS = """SELECT version, step, {MS}(created_at) AS ms FROM {db}.weights FINAL ORDER BY version"""

TASK = """SELECT task_id, taskset, split, prompt, answer, parent_task_id, synthesizer, generation, parent_outcome
FROM {db}.tasks FINAL WHERE task_id = {id:String} LIMIT 1"""

# A task's family (rftbus/producers/synthesis/): the tasks written from it, and how the policy did on each (its
# explorer groups on raw, a later pass of a task, id `<id>.pN`, counted with it).
CHILDREN = """
SELECT task_id, prompt, answer, generation, synthesizer, parent_outcome, {MS}(created_at) AS created_ms
FROM {db}.tasks FINAL WHERE parent_task_id = {id:String} ORDER BY created_at, task_id LIMIT 200"""

OUTCOMES = """
SELECT replaceRegexpOne(task_id, '[.]p[0-9]+$', '') AS task, count() AS answers, avg(reward) AS mean_reward
FROM {db}.experiences FINAL
WHERE topic = 'raw' AND source = 'explorer' AND has({ids:Array(String)}, replaceRegexpOne(task_id, '[.]p[0-9]+$', ''))
GROUP BY task"""
