// placeholder
const BUNDLE = __RELAY_BUNDLE_CONFIG__;

