// (being written: ThreadPool and Readahead; see the helper's brief)
#pragma once
