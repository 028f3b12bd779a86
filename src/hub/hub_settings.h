// Where models come from and where they are kept, read from the variables the `huggingface_hub` Python
// library reads, with its defaults, so that both use one cache and one token:
//   HF_ENDPOINT      the hub's base URL (default https://huggingface.co)
//   HF_TOKEN         the access token (else the file HF_TOKEN_PATH, else $HF_HOME/token, as `hf auth login` writes)
//   HF_HOME          default $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface
//   HF_HUB_CACHE     the model cache (default $HF_HOME/hub; HUGGINGFACE_HUB_CACHE, its older name, is read too)
//   HF_HUB_OFFLINE   1/true/yes/on: never use the network, only what the cache holds
#pragma once

#include <string>

namespace kvstash::hub {

struct HubSettings {
    std::string endpoint = "https://huggingface.co";  // no trailing slash
    std::string token;                                // empty: anonymous
    std::string cache_dir;                            // the hub cache (holds models--OWNER--NAME folders)
    bool offline = false;

    static HubSettings from_environment();
};

}  // namespace kvstash::hub
