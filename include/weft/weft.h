/* weft/weft.h: the whole public API. */
#ifndef WEFT_WEFT_H
#define WEFT_WEFT_H

#include <weft/buf.h>
#include <weft/clock.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/loop.h>
#include <weft/source.h>
#include <weft/timer.h>
#include <weft/version.h>

#endif /* WEFT_WEFT_H */
