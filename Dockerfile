# svcnet's images built with docker or buildah, for machines that have
# them; `make images` builds the same images here without a daemon
# (hack/images), and hack/images/dockerfile_test.go keeps the two in step.
#
#   docker build --target svcnet       -t ghcr.io/svcnet-io/svcnet:dev .
#   docker build --target svcnet-agent -t ghcr.io/svcnet-io/svcnet-agent:dev .
#   buildah bud --target svcnet-agent  -t ghcr.io/svcnet-io/svcnet-agent:dev .

ARG GO_VERSION=1.26
ARG DEBIAN_VERSION=bookworm

# The binaries, static: svcnet (the manager's image) and svcnet-agent (the
# agent's).
FROM golang:${GO_VERSION}-${DEBIAN_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
    -ldflags "-s -w -buildid= -X github.com/svcnet-io/svcnet/internal/platform/version.Version=${VERSION}" \
    -o /out/ ./cmd/svcnet ./cmd/svcnet-agent

# The images' roots, assembled by the script `make images` runs.
FROM debian:${DEBIAN_VERSION} AS roots
RUN apt-get update
COPY hack/images/ /images/
RUN /images/root.sh svcnet /roots/svcnet && \
    /images/root.sh svcnet-agent /roots/svcnet-agent /tmp/debs

# The manager: the binary and a few /etc files, as nonroot.
FROM scratch AS svcnet
COPY --from=roots /roots/svcnet/ /
COPY --from=build /out/svcnet /svcnet
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER 65532:65532
ENTRYPOINT ["/svcnet"]
CMD ["manager"]

# The node agent: svcnet-agent with Debian's iptables, nftables and conntrack.
FROM scratch AS svcnet-agent
COPY --from=roots /roots/svcnet-agent/ /
COPY --from=build /out/svcnet-agent /svcnet-agent
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER 0:0
ENTRYPOINT ["/svcnet-agent"]
CMD ["agent"]
