/*
 * curl_ceiling.c - the ceiling for http/s3 reads: a plain libcurl multi loop
 * of range GETs into preallocated buffers, sharing no code with io/.
 *   curl_ceiling URL SIZE CHUNK PARALLEL TOTAL [--sigv4 key:secret:region] [--resolve h:p:a]
 *                [--buffer BYTES]
 * Prints "curl_ceiling: ... MiB/s=N"; exits 1 if any answer was not a 206 of the right length.
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct slot {
    CURL *e;
    char *buf;
    uint64_t want, got;
    char range[64];
    int busy;
};

static size_t on_data(char *d, size_t sz, size_t nm, void *ud)
{
    struct slot *s = ud;
    size_t n = sz * nm;
    if (s->got + n > s->want)
        return 0;
    memcpy(s->buf + s->got, d, n);
    s->got += n;
    return n;
}

static uint64_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1048576; break;
    case 'g': case 'G': v *= 1073741824.0; break;
    default: break;
    }
    return (uint64_t)v;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *url, *sigv4 = NULL, *resolve = NULL;
    uint64_t size, chunk, total, issued = 0, bytes = 0, nchunks;
    long bufsize = 512 * 1024;
    int par, errors = 0, running;
    char user[256] = "", pass[256] = "", provider[300] = "";
    struct curl_slist *hdrs = NULL, *res = NULL;
    struct slot *slots;
    CURLM *m;
    double t0, dt;

    if (argc < 6) {
        fprintf(stderr, "usage: curl_ceiling URL SIZE CHUNK PARALLEL TOTAL [--sigv4 key:secret:region] "
                        "[--resolve host:port:addr] [--buffer BYTES]\n");
        return 2;
    }
    url = argv[1];
    size = parse_size(argv[2]);
    chunk = parse_size(argv[3]);
    par = atoi(argv[4]);
    total = parse_size(argv[5]);
    for (int i = 6; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--sigv4") == 0)
            sigv4 = argv[i + 1];
        else if (strcmp(argv[i], "--resolve") == 0)
            resolve = argv[i + 1];
        else if (strcmp(argv[i], "--buffer") == 0)
            bufsize = (long)parse_size(argv[i + 1]);
    }
    if (!size || !chunk || par < 1 || !total) {
        fprintf(stderr, "curl_ceiling: SIZE, CHUNK, PARALLEL and TOTAL must be > 0\n");
        return 2;
    }
    if (sigv4) {
        /* key:secret:region, split from the right: a key may hold ':' (Swift's test:tester) */
        const char *r = strrchr(sigv4, ':'), *s;
        if (!r || r == sigv4)
            return fprintf(stderr, "curl_ceiling: --sigv4 wants key:secret:region\n"), 2;
        for (s = r - 1; s > sigv4 && *s != ':'; s--)
            ;
        if (s == sigv4)
            return fprintf(stderr, "curl_ceiling: --sigv4 wants key:secret:region\n"), 2;
        snprintf(user, sizeof user, "%.*s", (int)(s - sigv4), sigv4);
        snprintf(pass, sizeof pass, "%.*s", (int)(r - s - 1), s + 1);
        snprintf(provider, sizeof provider, "aws:amz:%s:s3", r + 1);
        hdrs = curl_slist_append(hdrs, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    }
    if (resolve)
        res = curl_slist_append(res, resolve);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    m = curl_multi_init();
    curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)par);
    slots = calloc((size_t)par, sizeof *slots);
    for (int i = 0; i < par; i++) {
        slots[i].buf = malloc(chunk);
        slots[i].e = curl_easy_init();
        curl_easy_setopt(slots[i].e, CURLOPT_URL, url);
        curl_easy_setopt(slots[i].e, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(slots[i].e, CURLOPT_WRITEDATA, &slots[i]);
        curl_easy_setopt(slots[i].e, CURLOPT_PRIVATE, (char *)&slots[i]);
        curl_easy_setopt(slots[i].e, CURLOPT_BUFFERSIZE, bufsize);
        curl_easy_setopt(slots[i].e, CURLOPT_NOSIGNAL, 1L);
        if (hdrs)
            curl_easy_setopt(slots[i].e, CURLOPT_HTTPHEADER, hdrs);
        if (res)
            curl_easy_setopt(slots[i].e, CURLOPT_RESOLVE, res);
        if (sigv4) {
            curl_easy_setopt(slots[i].e, CURLOPT_AWS_SIGV4, provider);
            curl_easy_setopt(slots[i].e, CURLOPT_USERNAME, user);
            curl_easy_setopt(slots[i].e, CURLOPT_PASSWORD, pass);
        }
    }
    nchunks = (size + chunk - 1) / chunk;
    t0 = now_s();
    for (;;) {
        CURLMsg *msg;
        int left, active = 0, finished = 0;
        for (int i = 0; i < par; i++) {
            struct slot *s = &slots[i];
            uint64_t off;
            if (s->busy || issued * chunk >= total)
                continue;
            off = (issued % nchunks) * chunk;
            s->want = off + chunk > size ? size - off : chunk;
            s->got = 0;
            snprintf(s->range, sizeof s->range, "%" PRIu64 "-%" PRIu64, off, off + s->want - 1);
            curl_easy_setopt(s->e, CURLOPT_RANGE, s->range);
            curl_multi_add_handle(m, s->e);
            s->busy = 1;
            issued++;
        }
        for (int i = 0; i < par; i++)
            active += slots[i].busy;
        if (!active)
            break;
        curl_multi_perform(m, &running);
        while ((msg = curl_multi_info_read(m, &left))) {
            struct slot *s;
            char *pv;
            long code = 0;
            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &pv);
            s = (struct slot *)pv;
            curl_easy_getinfo(s->e, CURLINFO_RESPONSE_CODE, &code);
            if (msg->data.result != CURLE_OK || code != 206 || s->got != s->want) {
                if (errors++ < 3)
                    fprintf(stderr, "curl_ceiling: range %s: %s, HTTP %ld, %" PRIu64 " of %" PRIu64 " bytes\n",
                            s->range, curl_easy_strerror(msg->data.result), code, s->got, s->want);
            }
            bytes += s->got;
            curl_multi_remove_handle(m, s->e);
            s->busy = 0;
            finished++;
        }
        /* refill at once: waiting first would leave the finished slots idle */
        if (!finished)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    dt = now_s() - t0;
    printf("curl_ceiling: chunk=%" PRIu64 " parallel=%d requests=%" PRIu64 " bytes=%" PRIu64
           " seconds=%.3f errors=%d MiB/s=%.1f\n",
           chunk, par, issued, bytes, dt, errors, (double)bytes / dt / 1048576.0);
    for (int i = 0; i < par; i++) {
        curl_easy_cleanup(slots[i].e);
        free(slots[i].buf);
    }
    free(slots);
    curl_multi_cleanup(m);
    curl_slist_free_all(hdrs);
    curl_slist_free_all(res);
    curl_global_cleanup();
    return errors ? 1 : 0;
}
