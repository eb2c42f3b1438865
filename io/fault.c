/* PLACEHOLDER (being written by a helper): fault injection not built yet. */
#include <errno.h>
#include <stdlib.h>
#include "io/io_int.h"
int ps_fault_parse(const char *spec, struct ps_fault **out, char *err)
{
    *out = NULL;
    if (spec && *spec)
        return ps_seterr(err, -ENOSYS, "fault injection not built yet");
    return 0;
}
int ps_fault_roll(struct ps_fault *f) { (void)f; return PS_FAULT_NONE; }
int ps_fault_stall_ms(const struct ps_fault *f) { (void)f; return 0; }
int ps_fault_latency_ms(const struct ps_fault *f) { (void)f; return 0; }
void ps_fault_corrupt(struct ps_fault *f, void *buf, size_t len) { (void)f; (void)buf; (void)len; }
uint64_t ps_fault_count(const struct ps_fault *f) { (void)f; return 0; }
void ps_fault_free(struct ps_fault *f) { (void)f; }
const char *ps_fault_spec(const struct ps_io_opts *o) { return o && o->fault ? o->fault : getenv("PAGESTREAM_FAULT"); }
