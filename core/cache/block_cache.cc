#include "core/cache/block_cache.h"
