/* SPDX-License-Identifier: Apache-2.0 */
/* A program built against an installed weft, the way a user builds one:
 * scripts/test.sh installs weft into a temporary prefix and builds this with
 * pkg-config and with CMake's find_package(weft). */
#include <stdio.h>

#include <weft/weft.h>

int main(void) {
  weft_loop_group *group;
  weft_loop_options opts;
  weft_loop_options_init(&opts);
  opts.n_loops = 1;
  if (weft_loop_group_new(&group, &opts) < 0 ||
      weft_loop_group_start(group) < 0)
    return 1;
  weft_loop_group_stop(group);
  int rc = weft_loop_group_join(group);
  weft_loop_group_free(group);
  printf("weft %s consumer: %s\n", WEFT_VERSION_STRING,
         rc == 0 ? "ok" : weft_strerror(rc));
  return rc == 0 ? 0 : 1;
}
