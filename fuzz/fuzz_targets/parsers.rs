//! Every parser of wire and ring-buffer bytes (hstrace_tools::fuzz::one) under libFuzzer. At
//! start, an empty corpus directory (the first argument) gets the seeds
//! (hstrace_tools::fuzz::seeds: the captured hellos, alone and as ring-buffer items).
#![no_main]

libfuzzer_sys::fuzz_target!(
    init: {
        let corpus = std::env::args().skip(1).find(|a| !a.starts_with('-'));
        if let Some(dir) = corpus {
            let empty = std::fs::read_dir(&dir).map_or(true, |mut d| d.next().is_none());
            if empty {
                std::fs::create_dir_all(&dir).expect("the corpus directory");
                for (i, seed) in hstrace_tools::fuzz::seeds().iter().enumerate() {
                    std::fs::write(format!("{dir}/seed-{i:02}"), seed).expect("a seed file");
                }
            }
        }
    },
    |data: &[u8]| hstrace_tools::fuzz::one(data)
);
