/* The public connection calls. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

int vram_connect(const char *path, const char *name, unsigned flags,
		 vram_client **out)
{
	unsigned eg = error_generation();
	int sock, r;

	if (out)
		*out = NULL;
	if (!out)
		return error_finish(
			eg, error_set(EINVAL, "vram_connect: out is required"));
	if (flags != 0)
		return error_finish(
			eg,
			error_set(EINVAL, "vram_connect: unknown flags 0x%x",
				  flags));
	if (name && strlen(name) > NAME_MAX_LEN)
		return error_finish(
			eg,
			error_set(EINVAL, "client name is longer than %d bytes",
				  NAME_MAX_LEN));
	if (!path) {
		const char *env = getenv("VRAM_SOCKET");
		path = env && env[0] ? env : VRAM_DEFAULT_SOCKET;
	}
	if (!name)
		name = program_invocation_short_name &&
				       program_invocation_short_name[0] ?
			       program_invocation_short_name :
			       "libvram";
	r = connection_connect(path, &sock);
	if (r < 0)
		return error_finish(eg, r);
	r = connection_open(sock, name, out);
	return error_finish(eg, r);
}

void vram_client_close(vram_client *c)
{
	bool forked;

	if (!registry_client_take(c, &forked))
		return;
	/* An inherited client's fds are closed already (registry.c); its
	 * memory may be in any state, so it is left alone. */
	if (!forked)
		connection_close(c);
}

const char *vram_client_backend(vram_client *c)
{
	const char *b;

	if (registry_client_enter(c) < 0)
		return NULL;
	b = c->backend;
	registry_client_leave(c);
	return b;
}

int vram_client_fd(vram_client *c)
{
	unsigned eg = error_generation();
	int fd, r;

	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	fd = c->sock;
	registry_client_leave(c);
	return fd;
}

int vram_client_dispatch(vram_client *c, int timeout_ms)
{
	unsigned eg = error_generation();
	int r;

	if (timeout_ms < -1)
		return error_finish(
			eg, error_set(EINVAL,
				      "vram_client_dispatch: bad timeout %d",
				      timeout_ms));
	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	r = connection_dispatch(c, timeout_ms);
	registry_client_leave(c);
	return error_finish(eg, r);
}

int vram_client_start_thread(vram_client *c)
{
	unsigned eg = error_generation();
	int r;

	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	r = connection_thread_start(c);
	registry_client_leave(c);
	return error_finish(eg, r);
}

int vram_ping(vram_client *c)
{
	unsigned eg = error_generation();
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Ping ping = VRAM__PING__INIT;
	struct call call = { 0 };
	int r;

	r = registry_client_enter(c);
	if (r < 0)
		return error_finish(eg, r);
	req.body_case = VRAM__REQUEST__BODY_PING;
	req.ping = &ping;
	r = connection_call(c, &req, &call, -1);
	call_release(&call);
	registry_client_leave(c);
	return error_finish(eg, r);
}
