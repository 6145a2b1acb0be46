#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A stand-in for ssh in the tests: `local-remote.sh HOST COMMAND` runs
# COMMAND here with bash, whatever HOST is (samples/kv/scripts/kv-cluster-hosts.sh's
# WEFT_REMOTE).
shift
exec bash -c "$1"
