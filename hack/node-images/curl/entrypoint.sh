#!/bin/sh
# Entrypoint of svcnet's curl image, behaving as curlimages/curl's: with
# no arguments it prints curl's help; when the first argument is an
# option or no command of this image, the arguments are curl's;
# otherwise they are a command to run (`sh -c ...`, `curl ...`).
set -e
if [ $# -eq 0 ]; then
	set -- curl --help
elif [ "${1#-}" != "$1" ] || ! command -v "$1" >/dev/null 2>&1; then
	set -- curl "$@"
fi
exec "$@"
