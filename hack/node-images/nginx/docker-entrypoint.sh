#!/bin/sh
# Entrypoint of svcnet's nginx image: when the command is nginx, listen on
# IPv6 as well if the Pod's network has it (the default server then
# answers on [::]:80 too), then run the command.
if [ "$1" = nginx ] || [ "$1" = nginx-debug ]; then
	listen=/etc/nginx/conf.d/default.ipv6-listen
	if [ -e /proc/net/if_inet6 ] && [ -w /etc/nginx/conf.d ]; then
		echo 'listen [::]:80;' >"$listen"
	fi
fi
exec "$@"
