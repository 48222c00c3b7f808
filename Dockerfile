# The hailstorm image: the library, the CLI, the negotiator and a Java runtime for Spark.
# The same image runs the Spark master and workers, so executors have the topology's code
# and the same Python as the driver.
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    PYSPARK_PYTHON=/usr/local/bin/python \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python \
    PYTHONUNBUFFERED=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY hailstorm ./hailstorm
COPY topologies ./topologies
RUN pip install --no-cache-dir '.[s3]'

ENTRYPOINT []
CMD ["hailstorm", "--help"]
