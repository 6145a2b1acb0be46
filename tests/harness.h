/* Shared test harness: every test program defines weft_test_suite() and links
 * harness.c, whose main() runs the suite with Check and exits non-zero on any
 * failure. Helpers here capture weft's log so tests can assert on it. */
#ifndef WEFT_TESTS_HARNESS_H
#define WEFT_TESTS_HARNESS_H

#include <check.h>
#include <stddef.h>

/** Each test program returns its suite here. */
Suite *weft_test_suite(void);

/** Starts capturing weft_log messages (all levels) into memory. */
void th_log_capture_start(void);
/** Stops capturing; messages already captured stay readable. */
void th_log_capture_stop(void);
/** Number of captured messages containing `needle`. Thread-safe. */
int th_log_count(const char *needle);
/** All captured messages, one per line (valid until the next capture). */
const char *th_log_text(void);

#endif
