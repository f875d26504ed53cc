#include "core/cache/prefetch.h"
