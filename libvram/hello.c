/* SPDX-License-Identifier: Apache-2.0 */
/* The hello exchange that opens a session, on a new connection and on a
 * reconnection (reconnect.c). */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "call.h"
#include "client.h"

/* Sends hello and keeps what the daemon says of itself and its devices
 * (client.h). */
/* A setting that is on unless $name is "0". */
static bool hello_env_on(const char *name)
{
	const char *v = getenv(name);
	return !(v && strcmp(v, "0") == 0);
}

int client_hello(struct vram_client *c)
{
	Vram__Request req = VRAM__REQUEST__INIT;
	Vram__Hello hello = VRAM__HELLO__INIT;
	struct call call = { 0 };
	int r;

	hello.version = WIRE_PROTOCOL_VERSION;
	hello.name = c->name;
	/* The instance this process says it is (a pod, a container), for
	 * selecting its pools by name across PID namespaces. */
	const char *instance = getenv("VRAM_INSTANCE");
	if (instance && *instance)
		hello.instance = (char *)instance;
	/* The job this process is a rank of, for gang pause and resume. */
	const char *job = getenv("VRAM_JOB");
	if (job && *job)
		hello.job = (char *)job;
	/* Restores take their chunks as the daemon makes them, one ahead of
	 * the copy (events.c); VRAM_RESUME_IN_PARTS=0 takes them all at
	 * once, as before. */
	hello.resume_in_parts = hello_env_on("VRAM_RESUME_IN_PARTS");
	/* Saves unmap each chunk once saved, so the daemon lets go of it
	 * while the rest is saved (events.c); VRAM_SAVE_IN_PARTS=0 keeps
	 * every chunk until the whole pool is saved, as before. */
	hello.save_in_parts = hello_env_on("VRAM_SAVE_IN_PARTS");
	req.body_case = VRAM__REQUEST__BODY_HELLO;
	req.hello = &hello;
	r = call_run(c, &req, &call, CONNECT_TIMEOUT_MS);
	if (r == -EPROTONOSUPPORT)
		r = error_set(EPROTO,
			      "vramd does not speak protocol version %u: %s",
			      WIRE_PROTOCOL_VERSION, vram_last_error());
	if (r < 0)
		goto out;
	const Vram__Response *resp = call.msg->response;
	if (resp->body_case != VRAM__RESPONSE__BODY_HELLO || !resp->hello) {
		r = error_set(EPROTO,
			      "vramd answered hello with something else");
		goto out;
	}
	const Vram__HelloReply *h = resp->hello;
	if (h->version != WIRE_PROTOCOL_VERSION) {
		r = error_set(EPROTO,
			      "vramd speaks protocol version %u, libvram %u",
			      h->version, WIRE_PROTOCOL_VERSION);
		goto out;
	}
	snprintf(c->backend, sizeof(c->backend), "%s",
		 h->backend ? h->backend : "");
	snprintf(c->daemon_version, sizeof(c->daemon_version), "%s",
		 h->daemon_version ? h->daemon_version : "");
	c->session_id = h->session_id;
	c->max_chunks = h->max_chunks;
	c->n_devices = 0;
	for (size_t i = 0; i < h->n_devices && c->n_devices < VRAM_MAX_DEVICES;
	     i++) {
		const Vram__DeviceInfo *d = h->devices[i];
		if (!d)
			continue;
		struct client_device *cd = &c->devices[c->n_devices++];
		cd->index = d->index;
		snprintf(cd->uuid, sizeof(cd->uuid), "%s",
			 d->uuid ? d->uuid : "");
		cd->total_bytes = d->total_bytes;
		cd->free_bytes = d->free_bytes;
		cd->granularity = d->granularity;
	}
out:
	call_release(&call);
	return r;
}
