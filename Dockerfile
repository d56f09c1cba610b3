# The operator image: specinfer-operator on a slim, pinned Python, non-root, read-only root filesystem.
#   docker build -t REGISTRY/specinfer-operator:VERSION .
# PYTHON_IMAGE is any Debian-based Python 3.11 with `python` on PATH (images/build builds one from Debian
# packages where no registry is reachable).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY runtime ./runtime
COPY operator ./operator
RUN python -m venv /opt/specinfer \
 && /opt/specinfer/bin/pip install --no-cache-dir --upgrade pip==25.3 \
 && /opt/specinfer/bin/pip install --no-cache-dir .

FROM ${PYTHON_IMAGE}
# The release's version (a test keeps it the package's) and the commit built (make release passes both).
ARG VERSION=0.2.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="specinfer-operator" \
      org.opencontainers.image.description="Kubernetes operator for speculative-decoding inference with vLLM-Ascend" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/specinfer/specinfer" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /opt/specinfer /opt/specinfer
ENV PATH="/opt/specinfer/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8443 8081
ENTRYPOINT ["specinfer-operator"]
