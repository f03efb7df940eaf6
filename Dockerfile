# One image for every factgate process: web (gunicorn), worker, beat, migrations, the simulator.
# docker-compose.yml and the Procfile pick the command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    FACTGATE_INSTANCE_PATH=/app/instance \
    FACTGATE_LOG_FORMAT=json

WORKDIR /app

# The packages listed in pyproject.toml, installed (not editable) with their data: templates, static
# files, migrations, the simulator corpus.
COPY pyproject.toml README.md ./
COPY checks ./checks
COPY clients ./clients
COPY config ./config
COPY models ./models
COPY migrations ./migrations
COPY jobs ./jobs
COPY workers ./workers
COPY web ./web
COPY simulator ./simulator
COPY cli ./cli
COPY examples ./examples
RUN pip install . \
    && useradd --create-home --uid 10001 factgate \
    && mkdir -p /app/instance \
    && chown factgate /app/instance

USER factgate
EXPOSE 8000
CMD ["gunicorn", "--config", "python:web.gunicorn_conf", "--bind", "0.0.0.0:8000", "--workers", "2", \
     "--worker-class", "gthread", "--threads", "8", \
     "--access-logfile", "-", "web.app:create_app()"]
